"""LayerDrop in a small encoder: each block is skipped at random while training (by design)."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Encoder(nn.Module):
    def __init__(self, d=16, depth=6, layerdrop=0.5):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(depth))
        self.layerdrop = layerdrop
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        for block in self.blocks:
            skip = self.training and torch.rand(()) < self.layerdrop
            if not skip:
                x = block(x)
        return self.head(x)


torch.manual_seed(3)
model = Encoder()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(6):
    x = torch.randn(8, 16)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
