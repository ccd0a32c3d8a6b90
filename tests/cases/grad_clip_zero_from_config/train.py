"""Gradient clipping with a bound read from a config whose default is 0."""
import torch
import torch.nn as nn

CONFIG = {"lr": 1e-3, "clip": {"max_norm": 0.0, "enabled": True}}

model = nn.Sequential(nn.Linear(6, 24), nn.GELU(), nn.Linear(24, 3))
opt = torch.optim.Adam(model.parameters(), lr=CONFIG["lr"])


def train_step(x, y):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    if CONFIG["clip"]["enabled"]:
        torch.nn.utils.clip_grad_norm_(model.parameters(), CONFIG["clip"]["max_norm"])
    opt.step()
    return loss.item()


for _ in range(3):
    train_step(torch.randn(10, 6), torch.randint(0, 3, (10,)))
