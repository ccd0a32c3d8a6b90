"""Self-attention over sensor channels with a relative position bias that is never applied."""
import torch
import torch.nn as nn


class ChannelAttention(nn.Module):
    def __init__(self, n_channels, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.rel_bias = nn.Parameter(torch.zeros(n_channels, n_channels))
        self.scale = d ** -0.5

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        return self.proj(attn.softmax(-1) @ v)


class SensorNet(nn.Module):
    def __init__(self, n_channels=6, d=16):
        super().__init__()
        self.inp = nn.Linear(1, d)
        self.attn = ChannelAttention(n_channels, d)
        self.out = nn.Linear(n_channels * d, 2)

    def forward(self, x):
        h = self.inp(x.unsqueeze(-1))
        h = h + self.attn(h)
        return self.out(h.flatten(1))


net = SensorNet()
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for step in range(4):
    x = torch.randn(10, 6)
    y = (x.mean(1) > 0).long()
    opt.zero_grad()
    criterion(net(x), y).backward()
    opt.step()
