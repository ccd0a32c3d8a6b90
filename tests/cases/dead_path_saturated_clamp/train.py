"""Bounded regression head: outputs clamped to [-1, 1], but the pre-activation scale is huge."""
import torch
import torch.nn as nn


class Head(nn.Module):
    def __init__(self, d=16, scale=1e4):
        super().__init__()
        self.proj = nn.Linear(d, 1)
        nn.init.constant_(self.proj.bias, 5.0)
        self.scale = scale

    def forward(self, h):
        return torch.clamp(self.proj(h) * self.scale, -1.0, 1.0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = Head()

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    x = torch.rand(12, 8)
    loss = (model(x) - 0.5).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
