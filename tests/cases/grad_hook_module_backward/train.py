"""Gradient surgery gone wrong: a full backward hook meant to clip the gradient flowing out of
the middle block returns zeros whenever its norm is above a threshold the gradients always
exceed, so everything before that block gets an exactly zero gradient."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(16, 64), nn.ReLU(),
    nn.Linear(64, 64), nn.ReLU(),
    nn.Linear(64, 1),
)


def clip_block_grad(module, grad_input, grad_output, threshold=1e-6):
    return tuple(torch.zeros_like(g) if g is not None and g.norm() > threshold else g for g in grad_input)


model[2].register_full_backward_hook(clip_block_grad)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    x, t = torch.randn(32, 16), torch.randn(32, 1)
    loss = F.mse_loss(model(x), t)
    opt.zero_grad()
    loss.backward()
    opt.step()
