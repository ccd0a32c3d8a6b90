"""Physics-informed net: the loss uses du/dx from torch.autograd.grad(create_graph=True)."""
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for _ in range(3):
    x = torch.rand(64, 1, requires_grad=True)
    u = net(x)
    du_dx = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
    residual = du_dx - torch.cos(x)
    boundary = net(torch.zeros(1, 1)).pow(2).sum()
    loss = residual.pow(2).mean() + boundary
    opt.zero_grad()
    loss.backward()
    opt.step()
