"""Saliency maps: gradients of the class score with respect to the input, batch after batch;
no weight is meant to change (no optimizer, no update)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3))
model.eval()
maps = []
for batch in range(4):
    x = torch.randn(2, 1, 8, 8, requires_grad=True)
    score = model(x)[:, 1].sum()
    model.zero_grad()
    score.backward()
    maps.append(x.grad.abs().amax(dim=1))
print(torch.stack(maps).shape)
