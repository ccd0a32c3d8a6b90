"""A neural ODE integrated with explicit Euler steps, trained through the solver: the state
after 15,000 steps of h <- h + dt * f(h), with f a small MLP. Its autograd graph is a chain
about 90,000 nodes deep. Nothing is wrong with it; gradsleuth must not make freeing that graph
crash the process (torch frees chains of nodes that Python has read by recursion)."""

import torch
import torch.nn as nn


class Field(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, d))

    def forward(self, h):
        return self.net(h)


class EulerODE(nn.Module):
    def __init__(self, steps=15_000, dt=1e-4):
        super().__init__()
        self.field, self.steps, self.dt = Field(), steps, dt

    def forward(self, h):
        for _ in range(self.steps):
            h = h + self.dt * self.field(h)
        return h


torch.manual_seed(0)
model = EulerODE()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(2):
    h0, target = torch.randn(8, 4), torch.zeros(8, 4)
    loss = ((model(h0) - target) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
del loss
print("done", flush=True)
