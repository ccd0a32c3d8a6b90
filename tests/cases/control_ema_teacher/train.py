"""Self-distillation with an EMA teacher (BYOL-style): the teacher is never optimized."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

student = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 16))
teacher = copy.deepcopy(student)
for p in teacher.parameters():
    p.requires_grad_(False)
predictor = nn.Linear(16, 16)
opt = torch.optim.Adam(list(student.parameters()) + list(predictor.parameters()), lr=1e-3)


@torch.no_grad()
def ema_update(tau=0.99):
    for pt, ps in zip(teacher.parameters(), student.parameters()):
        pt.mul_(tau).add_(ps, alpha=1 - tau)


for _ in range(3):
    x = torch.randn(8, 12)
    v1, v2 = x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)
    p = F.normalize(predictor(student(v1)), dim=-1)
    with torch.no_grad():
        z = F.normalize(teacher(v2), dim=-1)
    loss = (2 - 2 * (p * z).sum(-1)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    ema_update()
