"""Quantization-aware toy: activations rounded to 4 bits without a straight-through estimator."""
import torch
import torch.nn as nn


class QuantAct(nn.Module):
    def __init__(self, bits=4):
        super().__init__()
        self.levels = 2 ** bits - 1

    def forward(self, x):
        x = torch.sigmoid(x)
        return torch.round(x * self.levels) / self.levels


model = nn.Sequential(nn.Linear(8, 16), QuantAct(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for _ in range(3):
    x = torch.randn(10, 8)
    loss = (model(x).squeeze(-1) - x.mean(-1)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
