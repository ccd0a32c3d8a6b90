"""SimSiam: symmetric loss with stop-gradient on the target branch, by design."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SimSiam(nn.Module):
    def __init__(self, d_in=20, d=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d_in, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, d))
        self.predictor = nn.Sequential(nn.Linear(d, 8), nn.ReLU(), nn.Linear(8, d))

    def forward(self, x1, x2):
        z1, z2 = self.encoder(x1), self.encoder(x2)
        p1, p2 = self.predictor(z1), self.predictor(z2)
        return p1, p2, z1.detach(), z2.detach()


def neg_cosine(p, z):
    return -F.cosine_similarity(p, z, dim=-1).mean()


model = SimSiam()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for _ in range(3):
    x = torch.randn(16, 20)
    p1, p2, z1, z2 = model(x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x))
    loss = 0.5 * neg_cosine(p1, z2) + 0.5 * neg_cosine(p2, z1)
    opt.zero_grad()
    loss.backward()
    opt.step()
