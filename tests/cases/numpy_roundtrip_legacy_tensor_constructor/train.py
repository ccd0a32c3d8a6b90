"""Multiple-instance learning: per-instance scores are collected in a Python list and turned
into a tensor with the legacy `torch.Tensor(list)` constructor, which reads each score as a
Python float; the instance scorer never learns."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
instance = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 1))
bag_head = nn.Linear(5, 1)
opt = torch.optim.SGD([*instance.parameters(), *bag_head.parameters()], lr=0.01)
for step in range(6):
    bag = torch.randn(5, 12)
    label = torch.rand(1)
    scores = [instance(bag[i]).squeeze() for i in range(bag.shape[0])]
    pooled = torch.Tensor(scores)
    loss = F.mse_loss(torch.sigmoid(bag_head(pooled)), label)
    opt.zero_grad()
    loss.backward()
    opt.step()
