"""An actor-critic on a contextual bandit whose policy term multiplies the sampled action
itself by the advantage instead of its log-probability. A draw from `Categorical.sample()`
carries no gradient: the critic learns, the policy never does."""
import torch
import torch.nn as nn
from torch.distributions import Categorical

torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
critic = nn.Linear(4, 1)
opt = torch.optim.Adam([*policy.parameters(), *critic.parameters()], lr=1e-2)
for step in range(5):
    state = torch.randn(32, 4)
    dist = Categorical(logits=policy(state))
    action = dist.sample()
    reward = (action == (state[:, 0] > 0).long()).float()
    advantage = reward - critic(state).squeeze(-1)
    loss = -(action.float() * advantage.detach()).mean() + advantage.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
