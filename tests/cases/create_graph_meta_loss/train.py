"""Learning a data-augmentation scale through a gradient-matching loss, without create_graph."""
import torch
import torch.nn as nn

net = nn.Linear(4, 1)
aug = nn.Linear(4, 4)  # learns how to perturb inputs
opt = torch.optim.Adam(list(net.parameters()) + list(aug.parameters()), lr=1e-3)

for _ in range(3):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    task = (net(x) - y).pow(2).mean()
    aug_loss = (net(x + aug(x)) - y).pow(2).mean()
    g_task = torch.autograd.grad(task, net.weight, retain_graph=True)[0]
    g_aug = torch.autograd.grad(aug_loss, net.weight)[0]
    loss = task + (g_task - g_aug).pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
