"""A GAN whose discriminator loss backpropagates into the generator too (no detach, the graph
kept), then the discriminator steps, the generator's stale gradients are cleared and the fakes
are scored anew by the stepped discriminator for the generator's loss: correct."""
import torch
import torch.nn as nn


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


torch.manual_seed(0)
netG, netD = Generator(), Discriminator()
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
ones, zeros = torch.ones(16, 1), torch.zeros(16, 1)
for it in range(4):
    real = torch.randn(16, 2) * 0.5 + 1
    fake = netG(torch.randn(16, 8))
    score_fake = netD(fake)
    loss_d = bce(netD(real), ones) + bce(score_fake, zeros)
    optD.zero_grad()
    loss_d.backward(retain_graph=True)
    optD.step()
    loss_g = bce(netD(fake), ones)
    optG.zero_grad()
    loss_g.backward()
    optG.step()
