"""Residual MLP block where the skip branch was written with .data (copied from old code)."""
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + torch.relu(self.fc(x)).data)


class Net(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.inp = nn.Linear(8, d)
        self.block = Block(d)
        self.out = nn.Linear(d, 1)

    def forward(self, x):
        return self.out(self.block(self.inp(x)))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    x = torch.randn(10, 8)
    loss = (model(x) - x[:, :1]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
