"""Regression on sensor data normalised by the loader; one shard was written without
normalisation (raw values in the thousands), so at step 40 a batch arrives 1e4 times larger
and the gradients explode for one step."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(2)
for step in range(1, 61):
    x = torch.randn(32, 8, generator=g)
    y = x[:, :2].sum(-1, keepdim=True)
    if step == 40:
        x, y = x * 1e4, y * 1e4  # the unnormalised shard
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
