"""A 'lazy' projection assigned in forward, so it is rebuilt on every call."""
import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, out_dim=8):
        super().__init__()
        self.out_dim = out_dim
        self.conv = nn.Conv1d(1, 4, 5, padding=2)

    def forward(self, x):
        h = torch.relu(self.conv(x.unsqueeze(1))).flatten(1)
        self.proj = nn.Linear(h.shape[-1], self.out_dim)
        return self.proj(h)


enc = Encoder()
opt = torch.optim.Adam(enc.parameters(), lr=1e-3)
for _ in range(3):
    x = torch.randn(6, 20)
    loss = (enc(x) - 1).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
