"""A small MLP fitted with gradients from `torch.autograd.grad` and a hand-written SGD step
that calls the out-of-place `p.sub(...)` (meant: `p.sub_(...)`): each call returns a new
tensor that is dropped, so the weights never move. `autograd.grad` fills no `.grad`."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
params = list(net.parameters())
lr = 0.1
for it in range(8):
    x = torch.rand(32, 3) * 2 - 1
    y = torch.sin(x).sum(dim=1, keepdim=True)
    loss = F.mse_loss(net(x), y)
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p.sub(lr * g)
