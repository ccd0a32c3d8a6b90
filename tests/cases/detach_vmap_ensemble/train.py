"""Model ensembling with torch.func, the tutorial's recipe: the members' stacked parameters train,
and a copy of one member on the meta device only gives the computation. The first layer's weights
are detached on their way into vmap (left from a "freeze the features" experiment), so only the
second layer learns."""
import copy

import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, vmap

members = [nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)) for _ in range(4)]
params, buffers = stack_module_state(members)
template = copy.deepcopy(members[0]).to("meta")
opt = torch.optim.Adam(params.values(), lr=1e-3)


def frozen_features(p):
    return {k: v.detach() if k.startswith("0.") else v for k, v in p.items()}


def member(p, b, x):
    return functional_call(template, (p, b), (x,))


for step in range(10):
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    preds = vmap(member, in_dims=(0, 0, None))(frozen_features(params), buffers, x)
    loss = ((preds - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())
