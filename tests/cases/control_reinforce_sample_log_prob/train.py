"""REINFORCE on a contextual bandit: actions are drawn with `Categorical.sample()` (no gradient
through the draw, by design) and the policy learns through `log_prob` of the drawn action."""
import torch
import torch.nn as nn
from torch.distributions import Categorical

torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
for _ in range(3):
    context = torch.randn(128, 4)
    dist = Categorical(logits=policy(context))
    action = dist.sample()
    reward = (action == context.argmax(1).clamp(max=2)).float()
    loss = -((reward - reward.mean()) * dist.log_prob(action)).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
