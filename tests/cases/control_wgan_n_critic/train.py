"""WGAN with weight clipping (Arjovsky et al.): the critic steps every iteration, the generator
once per five critic steps. The critic's loss is computed on `G(z)` without a detach, so the
generator's parameters get gradients that its own step later clears: nothing here is a bug."""
import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1))
opt_g = torch.optim.RMSprop(G.parameters(), lr=5e-5)
opt_d = torch.optim.RMSprop(D.parameters(), lr=5e-5)
n_critic = 5
for it in range(20):
    real = torch.randn(64, 2) + 2.0
    fake = G(torch.randn(64, 8))
    opt_d.zero_grad()
    d_loss = D(fake).mean() - D(real).mean()
    d_loss.backward()
    opt_d.step()
    with torch.no_grad():
        for p in D.parameters():
            p.clamp_(-0.01, 0.01)
    if it % n_critic == n_critic - 1:
        opt_g.zero_grad()
        g_loss = -D(G(torch.randn(64, 8))).mean()
        g_loss.backward()
        opt_g.step()
