"""Gradient accumulation done right: zero_grad after the step."""
import torch
import torch.nn as nn

ACCUM = 3
model = nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
opt.zero_grad()
for i in range(12):
    x = torch.randn(4, 10)
    loss = nn.functional.mse_loss(model(x), x[:, :1]) / ACCUM
    loss.backward()
    if (i + 1) % ACCUM == 0:
        opt.step()
        opt.zero_grad()
