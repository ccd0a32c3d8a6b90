"""'Fixing' the 'element 0 of tensors does not require grad' error by rebuilding the loss."""
import torch
import torch.nn as nn


def compute_loss(model, x, y):
    pred = model(x).argmax(-1).float()
    loss = (pred - y).abs().mean()
    return torch.tensor(loss.item(), requires_grad=True)


model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(9, 5), torch.randint(0, 4, (9,)).float()
    loss = compute_loss(model, x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
