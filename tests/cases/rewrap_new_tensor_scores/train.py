"""A ranking model: item scores are re-made with `new_tensor` to put them on the query's
device and dtype, which copies them without history; the scorer never learns."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
query_enc = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 16))
scorer = nn.Linear(16, 1)
calib = nn.Linear(1, 1)
opt = torch.optim.Adam([*query_enc.parameters(), *scorer.parameters(), *calib.parameters()], lr=1e-3)
for step in range(6):
    q = torch.randn(20, 32)
    target = torch.rand(20, 1)
    raw = scorer(query_enc(q))
    scores = q.new_tensor(raw)
    loss = F.binary_cross_entropy_with_logits(calib(scores), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
