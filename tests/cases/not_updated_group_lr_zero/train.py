"""Discriminative learning rates for fine-tuning: the backbone and the head get their own rates
from a config. The config spells the head's key `head_lr` while the code reads `lr_head`, so the
head's group falls back to 0.0 and never moves, while its gradients look healthy."""
import torch
import torch.nn as nn

config = {"backbone_lr": 1e-4, "head_lr": 1e-3}
backbone = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
head = nn.Linear(64, 5)
optimizer = torch.optim.AdamW(
    [
        {"params": backbone.parameters(), "lr": config.get("backbone_lr", 0.0)},
        {"params": head.parameters(), "lr": config.get("lr_head", 0.0)},
    ]
)
for _ in range(3):
    x, y = torch.randn(32, 16), torch.randint(0, 5, (32,))
    loss = nn.functional.cross_entropy(head(backbone(x)), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
