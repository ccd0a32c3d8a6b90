"""Feature normalisation for a cosine classifier using .data to 'avoid in-place issues'."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class CosineHead(nn.Module):
    def __init__(self, d, classes, scale=10.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(classes, d) * 0.1)
        self.scale = scale

    def forward(self, feats):
        w = self.weight / self.weight.data.norm(dim=1, keepdim=True)
        return self.scale * F.normalize(feats, dim=1) @ w.t()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 16))
        self.head = CosineHead(16, 5)

    def forward(self, x):
        feats = self.encoder(x)
        return self.head(feats.data)


model = Model()
opt = torch.optim.Adam(model.parameters(), 1e-3)
for _ in range(3):
    x, y = torch.randn(12, 20), torch.randint(0, 5, (12,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
