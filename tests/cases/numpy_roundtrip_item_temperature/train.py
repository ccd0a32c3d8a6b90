"""A classifier with a learnable temperature, read with `.item()` to keep it positive and
readable; the logits are divided by a Python float, so the temperature never learns."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class TempScaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 32), nn.GELU(), nn.Linear(32, 4))
        self.log_temp = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        temp = self.log_temp.exp().clamp(min=0.05).item()
        return self.body(x) / temp


torch.manual_seed(0)
model = TempScaled()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(6):
    x, y = torch.randn(16, 20), torch.randint(0, 4, (16,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
