"""A small GAN on 2-D points. The discriminator's update computes its loss and gradients and
clears them, but `opt_d.step()` was lost in a refactor: the discriminator never changes, while
the generator trains against it."""
import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
for _ in range(3):
    real = torch.randn(64, 2) * 0.5 + 2.0
    fake = G(torch.randn(64, 8))
    opt_d.zero_grad()
    d_loss = bce(D(real), torch.ones(64, 1)) + bce(D(fake.detach()), torch.zeros(64, 1))
    d_loss.backward()

    opt_g.zero_grad()
    g_loss = bce(D(fake), torch.ones(64, 1))
    g_loss.backward()
    opt_g.step()
