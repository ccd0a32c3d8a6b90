"""Mean-teacher style training where the loss is computed with the EMA copy instead of the
student: the optimizer holds the student's parameters, which never run."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
student = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
ema = copy.deepcopy(student)
for p in ema.parameters():
    p.requires_grad_(True)
opt = torch.optim.Adam(student.parameters(), lr=1e-3)
for step in range(6):
    x, y = torch.randn(24, 10), torch.randint(0, 3, (24,))
    loss = F.cross_entropy(ema(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        for pe, ps in zip(ema.parameters(), student.parameters()):
            pe.mul_(0.99).add_(ps, alpha=0.01)
