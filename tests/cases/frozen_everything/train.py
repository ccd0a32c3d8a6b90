"""Evaluated the model first with requires_grad_(False), then forgot to re-enable it."""
import torch
import torch.nn as nn


def evaluate(model, x, y):
    model.eval().requires_grad_(False)
    acc = (model(x).argmax(-1) == y).float().mean()
    return acc.item()


model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
xv, yv = torch.randn(10, 4), torch.randint(0, 3, (10,))
print("before training:", evaluate(model, xv, yv))
model.train()
for step in range(3):
    x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
