"""Fine-tuning with a frozen-then-unfrozen encoder, where the flag is inverted: the encoder is
meant to be detached during warm-up and trained afterwards, but it learns during warm-up and
is detached from step 30 on. The first steps look healthy; the encoder silently stops."""

import torch
import torch.nn as nn
import torch.nn.functional as F

WARMUP = 30


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


def train(model, opt, steps=80):
    g = torch.Generator().manual_seed(7)
    for step in range(1, steps + 1):
        model.freeze_encoder = step >= WARMUP  # meant: step < WARMUP
        x, y = torch.randn(8, 12, generator=g), torch.randint(0, 4, (8,), generator=g)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Model()
    train(model, torch.optim.Adam(model.parameters(), lr=1e-3))
