"""Multi-task training with a curriculum: the auxiliary reconstruction task is meant to be
switched *on* after warm-up, but the flag is inverted, so the auxiliary decoder learns for 30
steps and then silently stops."""

import torch
import torch.nn as nn
import torch.nn.functional as F

WARMUP = 30


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.classifier = nn.Linear(32, 4)
        self.decoder = nn.Linear(32, 16)

    def forward(self, x, with_aux):
        h = self.encoder(x)
        logits = self.classifier(h)
        recon = self.decoder(h) if with_aux else None
        return logits, recon


torch.manual_seed(0)
model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(3)
for step in range(1, 81):
    x = torch.randn(16, 16, generator=g)
    y = torch.randint(0, 4, (16,), generator=g)
    logits, recon = model(x, with_aux=step < WARMUP)  # meant: step >= WARMUP
    loss = F.cross_entropy(logits, y)
    if recon is not None:
        loss = loss + F.mse_loss(recon, x)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
