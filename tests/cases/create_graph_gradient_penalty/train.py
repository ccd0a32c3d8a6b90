"""WGAN-GP critic step: the gradient penalty is computed without create_graph=True."""
import torch
import torch.nn as nn

critic = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))


def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.shape[0], 1)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    grads = torch.autograd.grad(critic(mixed).sum(), mixed)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


for _ in range(3):
    real, fake = torch.randn(16, 2) + 2, torch.randn(16, 2)
    loss = critic(fake).mean() - critic(real).mean() + 10 * gradient_penalty(critic, real, fake)
    opt.zero_grad()
    loss.backward()
    opt.step()
