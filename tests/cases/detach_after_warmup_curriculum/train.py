"""Two-phase schedule: after warm-up the author meant to *unfreeze* the encoder, but the flag
is inverted, so from step 2 on the encoder's output is detached."""
import torch
import torch.nn as nn
import torch.nn.functional as F

WARMUP_STEPS = 1


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 24))
        self.head = nn.Linear(24, 4)
        self.freeze_encoder = False

    def forward(self, x):
        h = self.encoder(x)
        if self.freeze_encoder:
            h = h.detach()
        return self.head(h)


def set_phase(model, step):
    model.freeze_encoder = step >= WARMUP_STEPS  # meant: step < WARMUP_STEPS


model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(4):
    set_phase(model, step)
    x, y = torch.randn(8, 12), torch.randint(0, 4, (8,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
