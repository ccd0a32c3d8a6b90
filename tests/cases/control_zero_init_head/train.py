"""A classifier head initialised to zero (as torchvision's ViT and timm's Mixer do), trained
with everything else: the body gets exactly zero gradients in the first step only."""
import torch
import torch.nn as nn

body = nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh())
head = nn.Linear(32, 4)
nn.init.zeros_(head.weight)
nn.init.zeros_(head.bias)
model = nn.Sequential(body, head)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(4):
    x, y = torch.randn(16, 12), torch.randint(0, 4, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
