"""A custom initialisation meant to start ReLUs "slightly off" sets the first layer's bias to
-50 instead of -0.05: every unit is dead from the first step, and the first layer's gradient
is exactly zero for the whole run."""

import torch
import torch.nn as nn


def init(m):
    if isinstance(m, nn.Linear):
        nn.init.kaiming_normal_(m.weight)
        if m.out_features == 64:
            nn.init.constant_(m.bias, -50.0)  # meant: -0.05


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 1))
model.apply(init)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(4)
for _ in range(60):
    x = torch.randn(32, 10, generator=g)
    loss = (model(x) - x.sum(-1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
