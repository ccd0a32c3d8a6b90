"""A "safe" square root: `torch.where(s > 0, torch.sqrt(s), 0)`. The forward is finite (where
picks 0 for the negative scores), but sqrt still ran on them, and its gradient there is NaN:
where's backward multiplies it by 0, and 0 x NaN is NaN. Nothing about the forward values says
so (no zero goes into the sqrt): only a backward run with a check on each node finds it."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ScoreNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        z = self.encoder(x)
        s = z.sum(-1, keepdim=True)
        root = torch.where(s > 0, torch.sqrt(s), torch.zeros_like(s))
        return self.head(z * root)


torch.manual_seed(0)
model = ScoreNet()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(3)
for _step in range(1, 21):
    x, y = torch.randn(16, 10, generator=g), torch.randint(0, 3, (16,), generator=g)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
