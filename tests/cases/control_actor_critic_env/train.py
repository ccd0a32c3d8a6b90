"""Advantage actor-critic on a toy environment, in the shape of the common public RL scripts
(PyTorch's REINFORCE / actor-critic examples, CleanRL's PPO): the environment is a plain
object stepped with a Python action (`env.step(action.item())`, its result unpacked), the
episode's rewards are numbers kept in a list attribute of the agent and turned into returns
with `torch.tensor`, and the bootstrap value of the last observation comes from one method of
the agent under `no_grad` while the loss trains the same critic through another method."""
import torch
import torch.nn as nn
from torch.distributions import Categorical


class LineWorld:
    """Walk left or right on a line; reward 1 for each step taken towards the goal."""

    def __init__(self, size=6):
        self.size = size
        self.pos = 0

    def reset(self):
        self.pos = self.size // 2
        return self.observe(), {}

    def observe(self):
        obs = torch.zeros(self.size)
        obs[self.pos] = 1.0
        return obs

    def step(self, action):
        before = self.pos
        self.pos = max(0, min(self.size - 1, self.pos + (1 if action == 1 else -1)))
        reward = 1.0 if self.pos > before else 0.0
        done = self.pos == self.size - 1
        return self.observe(), reward, done, False, {}


class Agent(nn.Module):
    def __init__(self, n_obs=6, n_actions=2):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(n_obs, 16), nn.Tanh(), nn.Linear(16, n_actions))
        self.critic = nn.Sequential(nn.Linear(n_obs, 16), nn.Tanh(), nn.Linear(16, 1))
        self.rewards = []

    def get_value(self, x):
        return self.critic(x).squeeze(-1)

    def get_action_and_value(self, x):
        return Categorical(logits=self.actor(x)), self.critic(x).squeeze(-1)


torch.manual_seed(0)
env = LineWorld()
agent = Agent()
optimizer = torch.optim.Adam(agent.parameters(), lr=1e-2)
gamma = 0.9
obs, _ = env.reset()
for update in range(4):
    log_probs, values, entropies = [], [], []
    agent.rewards.clear()
    for t in range(5):
        dist, value = agent.get_action_and_value(obs)
        action = dist.sample()
        obs, reward, terminated, truncated, info = env.step(action.item())
        log_probs.append(dist.log_prob(action))
        values.append(value)
        entropies.append(dist.entropy())
        agent.rewards.append(reward)
        if terminated or truncated:
            obs, _ = env.reset()
    with torch.no_grad():
        next_value = agent.get_value(obs)
    R = next_value.item()
    returns = []
    for r in agent.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    values = torch.stack(values)
    advantages = returns - values.detach()
    policy_loss = -(torch.stack(log_probs) * advantages).mean()
    value_loss = ((returns - values) ** 2).mean()
    loss = policy_loss + 0.5 * value_loss - 0.01 * torch.stack(entropies).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
