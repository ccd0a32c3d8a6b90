"""A hand-written 'zero_grad' placed after backward: every gradient is set to None before the
optimizer steps, so nothing trains."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Conv1d(4, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 20, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(6):
    x, y = torch.randn(16, 4, 20), torch.randint(0, 2, (16,))
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    for p in model.parameters():
        p.grad = None
    opt.step()
