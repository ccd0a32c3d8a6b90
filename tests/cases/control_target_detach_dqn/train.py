"""DQN update with a target network: the bootstrapped target is detached on purpose."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def q_net(n_obs=4, n_actions=2):
    return nn.Sequential(nn.Linear(n_obs, 32), nn.ReLU(), nn.Linear(32, n_actions))


policy = q_net()
target = copy.deepcopy(policy)
opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
gamma = 0.99
for step in range(4):
    s, a = torch.randn(16, 4), torch.randint(0, 2, (16,))
    r, s2, done = torch.randn(16), torch.randn(16, 4), torch.zeros(16)
    q = policy(s).gather(1, a[:, None]).squeeze(1)
    with torch.no_grad():
        q_next = target(s2).max(1).values
    td_target = r + gamma * (1 - done) * q_next
    loss = F.smooth_l1_loss(q, td_target.detach())
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 2 == 1:
        target.load_state_dict(policy.state_dict())
