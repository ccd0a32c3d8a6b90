"""A hand-written SGD-with-momentum update (as in a course notebook): an optimizer object exists
only to clear the gradients; the weights are updated by hand under no_grad."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # used for zero_grad() only
velocity = [torch.zeros_like(p) for p in model.parameters()]
lr, momentum = 0.05, 0.9
for _ in range(3):
    x = torch.randn(32, 10)
    y = x[:, :1] * 2.0
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p, v in zip(model.parameters(), velocity):
            v.mul_(momentum).add_(p.grad)
            p.sub_(lr * v)
