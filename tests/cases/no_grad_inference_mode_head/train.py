"""A classifier whose projection head is evaluated under inference_mode inside forward
(meant as a speed-up for a frozen part, but the head is trained)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.GELU())
        self.proj = nn.Linear(32, 16)
        self.logit_scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        h = self.body(x)
        with torch.inference_mode():
            z = self.proj(h)
        return z * self.logit_scale


model = Classifier()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 16, (4,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
