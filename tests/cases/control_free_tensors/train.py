"""Tensors no module holds, trained: a plain-tensor regression and a torch.func ensemble whose
stacked parameters (not the template module's) are what the optimizer updates."""
import copy

import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, vmap

w = torch.randn(4, 1, requires_grad=True)
members = [nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)) for _ in range(3)]
params, buffers = stack_module_state(members)
template = copy.deepcopy(members[0]).to("meta")
opt = torch.optim.Adam([w, *params.values()], lr=1e-2)


def member(p, bufs, x):
    return functional_call(template, (p, bufs), (x,))


for step in range(10):
    x = torch.randn(32, 4)
    y = x.sum(-1, keepdim=True)
    ensemble = vmap(member, in_dims=(0, 0, None))(params, buffers, x).mean(0)
    loss = ((x @ w - y) ** 2).mean() + ((ensemble - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())
