"""VAE-style training where the KL helper detaches the encoder statistics 'for stability'."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, d_in=16, z=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 32), nn.ReLU())
        self.mu = nn.Linear(32, z)
        self.logvar = nn.Linear(32, z)

    def forward(self, x):
        h = self.net(x)
        return self.mu(h), self.logvar(h)


def kl_divergence(mu, logvar):
    mu, logvar = mu.detach(), logvar.detach()
    return -0.5 * torch.mean(1 + logvar - mu.pow(2) - logvar.exp())


def vae_loss(decoder, mu, logvar, x):
    z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
    recon = F.mse_loss(decoder(z.detach()), x)
    return recon + kl_divergence(mu, logvar)


enc, dec = Encoder(), nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 16))
opt = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()), lr=1e-3)
for _ in range(3):
    x = torch.randn(8, 16)
    mu, logvar = enc(x)
    loss = vae_loss(dec, mu, logvar, x)
    opt.zero_grad()
    loss.backward()
    opt.step()
