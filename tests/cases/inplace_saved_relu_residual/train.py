"""A pre-activation block that adds the skip connection in place after a sigmoid gate."""
import torch
import torch.nn as nn


class GatedBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.gate = nn.Linear(d, d)

    def forward(self, x):
        g = torch.sigmoid(self.gate(x))
        h = self.fc(x) * g
        g += 1.0
        return h + x


model = nn.Sequential(nn.Linear(4, 8), GatedBlock(8), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(5, 4)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
