"""A functional training loop: torch.func.grad over functional_call, the tensors in a dict
updated by hand, no optimizer. The module is a template: its own parameters never train."""
import torch
from torch import nn
from torch.func import functional_call, grad

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
params = {k: v.detach() for k, v in model.named_parameters()}
x, y = torch.randn(32, 4), torch.randn(32, 1)


def loss_fn(p, x, y):
    return nn.functional.mse_loss(functional_call(model, p, (x,)), y)


for step in range(5):
    g = grad(loss_fn)(params, x, y)
    params = {k: v - 0.1 * g[k] for k, v in params.items()}
print("loss", loss_fn(params, x, y).item())
