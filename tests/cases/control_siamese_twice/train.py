"""Siamese network: the same encoder applied to both inputs (contrastive loss)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Siamese(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, a, b):
        return self.encoder(a), self.encoder(b)


def contrastive(za, zb, same, margin=1.0):
    d = F.pairwise_distance(za, zb)
    return (same * d.pow(2) + (1 - same) * F.relu(margin - d).pow(2)).mean()


net = Siamese()
opt = torch.optim.Adam(net.parameters(), 1e-3)
for _ in range(3):
    a, b = torch.randn(10, 16), torch.randn(10, 16)
    same = torch.randint(0, 2, (10,)).float()
    opt.zero_grad()
    contrastive(*net(a, b), same).backward()
    opt.step()
