"""A regression loss helper that normalises the batch in place after the forward pass:
the first layer saved that batch to compute its weight's gradient."""
import torch
import torch.nn as nn


def loss_and_stats(model, x, y):
    pred = model(x)
    x.sub_(x.mean(0)).div_(x.std(0) + 1e-6)  # statistics for logging, computed in place
    return ((pred - y) ** 2).mean(), x.abs().max()


model = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(3):
    x, y = torch.randn(16, 5), torch.randn(16, 1)
    loss, peak = loss_and_stats(model, x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
