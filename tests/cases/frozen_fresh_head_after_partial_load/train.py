"""A sentence classifier whose encoder is restored from an earlier run's checkpoint; the
head is new. Only the last encoder block was meant to train, but the freeze loop's condition
is written for the encoder's names and matches the head as well."""
import copy

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
        return h.mean(1)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(32, 4)

    def forward(self, ids):
        return self.head(self.encoder(ids))


torch.manual_seed(0)
saved = copy.deepcopy(Encoder().state_dict())  # an earlier run's encoder checkpoint
model = Classifier()
model.encoder.load_state_dict(saved)
for name, p in model.named_parameters():
    p.requires_grad = "blocks.2" in name
opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for step in range(3):
    ids, y = torch.randint(0, 200, (8, 10)), torch.randint(0, 4, (8,))
    loss = nn.functional.cross_entropy(model(ids), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
