"""Metric learning where the embedding is detached before the projection head (op-level cause)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class EmbeddingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32))
        self.projector = nn.Linear(32, 8)

    def forward(self, x):
        feats = self.backbone(x)
        return F.normalize(self.projector(feats.detach()), dim=-1)


def triplet_step(model, opt, anchor, pos, neg):
    loss = F.triplet_margin_loss(model(anchor), model(pos), model(neg))
    opt.zero_grad()
    loss.backward()
    opt.step()


model = EmbeddingNet()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    a = torch.randn(8, 20)
    triplet_step(model, opt, a, a + 0.1 * torch.randn(8, 20), torch.randn(8, 20))
