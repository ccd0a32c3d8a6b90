"""A policy trained through a learned, differentiable dynamics model (pathwise gradients, as in
SVG/PILCO-style control): exploration noise is added by sampling the action from a Gaussian
around the policy's output. `.sample()` draws without a gradient, so the policy never learns;
`.rsample()` was meant."""
import torch
import torch.nn as nn
from torch.distributions import Normal


class Policy(nn.Module):
    def __init__(self, obs=6, act=2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs, 32), nn.Tanh(), nn.Linear(32, act))
        self.log_std = nn.Parameter(torch.full((act,), -1.0))

    def forward(self, s):
        mean = self.net(s)
        return Normal(mean, self.log_std.exp()).sample()


dynamics = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 6))
dynamics.requires_grad_(False)  # fitted beforehand, fixed while the policy trains
policy = Policy()
opt = torch.optim.Adam(policy.parameters(), lr=3e-4)
goal = torch.zeros(6)
for _ in range(3):
    s = torch.randn(64, 6)
    a = policy(s)
    s_next = dynamics(torch.cat([s, a], dim=1))
    loss = ((s_next - goal) ** 2).sum(1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
