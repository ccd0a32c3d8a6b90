"""A small GAN: separate optimizers, detached fakes for the discriminator step."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Generator(nn.Module):
    def __init__(self, z=8, d=2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(z, 32), nn.LeakyReLU(0.2), nn.Linear(32, d))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, d=2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x)


netG, netD = Generator(), Discriminator()
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
for it in range(4):
    real = torch.randn(16, 2) * 0.5 + 1
    fake = netG(torch.randn(16, 8))
    optD.zero_grad()
    d_loss = F.binary_cross_entropy_with_logits(netD(real), torch.ones(16, 1)) + F.binary_cross_entropy_with_logits(
        netD(fake.detach()), torch.zeros(16, 1)
    )
    d_loss.backward()
    optD.step()
    optG.zero_grad()
    g_loss = F.binary_cross_entropy_with_logits(netD(fake), torch.ones(16, 1))
    g_loss.backward()
    optG.step()
