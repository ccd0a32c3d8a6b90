"""A per-sample-gradient-norm regulariser computed with torch.func inside the loss."""
import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap

model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)


def sample_loss(params, x, y):
    pred = functional_call(model, params, (x.unsqueeze(0),))
    return (pred.squeeze() - y) ** 2


for _ in range(3):
    x, y = torch.randn(6, 4), torch.randn(6)
    params = {k: v.detach() for k, v in model.named_parameters()}
    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)
    noise_scale = sum(g.pow(2).sum() for g in per_sample.values()).item()
    loss = nn.functional.mse_loss(model(x).squeeze(-1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("noise", noise_scale)
