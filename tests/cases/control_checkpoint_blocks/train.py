"""Activation checkpointing on the residual blocks of an MLP."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class ResMLP(nn.Module):
    def __init__(self, d=32, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=False)
        return self.head(x)


model = ResMLP()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    x = torch.randn(8, 32)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
