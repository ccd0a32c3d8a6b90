"""A memory-saving Swish with a learnable slope, written as a custom autograd.Function that
recomputes the sigmoid in backward. Its backward returns the input's gradient only (the slope's
is left as None), so the slopes never train."""
import torch
import torch.nn as nn


class SwishFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x, beta)
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def backward(ctx, grad_out):
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        grad_x = grad_out * (s + beta * x * s * (1 - s))
        return grad_x, None


class LearnableSwish(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.beta = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return SwishFn.apply(x, self.beta)


model = nn.Sequential(nn.Linear(10, 32), LearnableSwish(32), nn.Linear(32, 32), LearnableSwish(32), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    x = torch.randn(64, 10)
    y = torch.sin(x.sum(1, keepdim=True))
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
