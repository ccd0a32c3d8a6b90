"""The optimizer holds the model's parameters, but the forward runs on detached copies of
them through functional_call: the loss never sees the tensors the optimizer steps."""
import torch
from torch import nn
from torch.func import functional_call

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 4), torch.randn(32, 1)
for step in range(5):
    params = {k: v.detach().requires_grad_() for k, v in model.named_parameters()}
    loss = nn.functional.mse_loss(functional_call(model, params, (x,)), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())
