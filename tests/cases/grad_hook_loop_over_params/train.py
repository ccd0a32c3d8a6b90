"""Gradient "clipping" by hooks registered in a loop: the inverted test zeroes every gradient."""

import torch
from torch import nn

LIMIT = 5.0

model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
encoder = model[:4]
for p in encoder.parameters():
    p.register_hook(lambda g: g if g.norm() > LIMIT else torch.zeros_like(g))

opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(4):
    x = torch.randn(32, 8)
    loss = (model(x) - x[:, :1]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
