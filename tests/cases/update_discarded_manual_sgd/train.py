"""A two-layer regression net trained with a hand-written SGD step that assigns the update to
the loop variable: `p = p - lr * p.grad` rebinds the name, the weights never move."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
lr = 0.05
for epoch in range(6):
    x = torch.randn(64, 8)
    y = x.sum(dim=1, keepdim=True)
    loss = F.mse_loss(model(x), y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p = p - lr * p.grad
    print(f"epoch {epoch} loss {loss.item():.4f}")
