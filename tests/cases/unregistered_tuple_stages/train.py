"""A small U-Net-like denoiser; the decoder stages were put in a tuple for 'immutability'."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, 3, padding=1)
        self.norm = nn.GroupNorm(4, c_out)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


class Decoder(nn.Module):
    def __init__(self, channels=(32, 16, 8)):
        super().__init__()
        self.stages = tuple(Block(a, b) for a, b in zip(channels[:-1], channels[1:]))
        self.out = nn.Conv1d(channels[-1], 1, 1)

    def forward(self, h):
        for stage in self.stages:
            h = stage(h)
        return self.out(h)


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv1d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv1d(16, 32, 3, padding=1))
        self.decoder = Decoder()

    def forward(self, x):
        return self.decoder(self.encoder(x))


def noisy_batch(n=8, length=64):
    clean = torch.sin(torch.linspace(0, 6.28, length)).repeat(n, 1, 1) * torch.rand(n, 1, 1)
    return clean + 0.1 * torch.randn_like(clean), clean


net = Denoiser()
opt = torch.optim.Adam(net.parameters(), lr=2e-3)
for it in range(5):
    noisy, clean = noisy_batch()
    loss = nn.functional.mse_loss(net(noisy), clean)
    opt.zero_grad()
    loss.backward()
    opt.step()
