"""Two-stage model: stage-one features re-wrapped with torch.as_tensor(dtype=...) for stage two."""
import torch
import torch.nn as nn


stage1 = nn.Sequential(nn.Linear(10, 16), nn.ReLU())
stage2 = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(list(stage1.parameters()) + list(stage2.parameters()), lr=1e-3)


def forward(x):
    feats = stage1(x)
    feats = torch.tensor(feats, dtype=torch.float32)
    return stage2(feats)


for _ in range(3):
    x, y = torch.randn(6, 10), torch.randint(0, 2, (6,))
    loss = nn.functional.cross_entropy(forward(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
