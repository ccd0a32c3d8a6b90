"""Control: a restored encoder with a new head that adds a fixed sinusoidal table, frozen by
the head's own constructor (part of the architecture). The encoder's lower layers are frozen
on purpose; the last block and the head's projection train."""
import copy
import math

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(200, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.GELU()) for _ in range(3))

    def forward(self, ids):
        h = self.embed(ids)
        for block in self.blocks:
            h = h + block(h)
        return h


class Head(nn.Module):
    def __init__(self, length=10, dim=32):
        super().__init__()
        pos = torch.arange(length).unsqueeze(1) * torch.exp(torch.arange(0, dim, 2) * (-math.log(1e4) / dim))
        self.table = nn.Parameter(torch.cat([pos.sin(), pos.cos()], 1))
        self.table.requires_grad = False
        self.proj = nn.Linear(dim, 4)

    def forward(self, h):
        return self.proj((h + self.table).mean(1))


torch.manual_seed(0)
saved = copy.deepcopy(Encoder().state_dict())
encoder, head = Encoder(), Head()
encoder.load_state_dict(saved)
model = nn.Sequential(encoder, head)
for name, p in encoder.named_parameters():
    p.requires_grad = "blocks.2" in name
opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for step in range(3):
    ids, y = torch.randint(0, 200, (8, 10)), torch.randint(0, 4, (8,))
    loss = nn.functional.cross_entropy(model(ids), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
