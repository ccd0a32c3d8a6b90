"""Force matching: an energy network trained only on its negative gradient with respect to
the positions (create_graph=True). The output layer's bias shifts the energy by a constant
and gets no gradient by design."""
import torch
import torch.nn as nn

energy_net = nn.Sequential(nn.Linear(3, 32), nn.Softplus(), nn.Linear(32, 32), nn.Softplus(), nn.Linear(32, 1))
opt = torch.optim.Adam(energy_net.parameters(), lr=1e-3)
for step in range(3):
    pos = torch.randn(10, 3, requires_grad=True)
    target_forces = -2.0 * pos.detach()
    energy = energy_net(pos).sum()
    (grad_pos,) = torch.autograd.grad(energy, pos, create_graph=True)
    loss = ((-grad_pos - target_forces) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
