"""A DeepSets encoder that maps each set element with torch.vmap over its phi network, then
pools; the pooled features are detached before the classifier (a stop-gradient left over
from a frozen-encoder experiment), so phi never learns."""
import torch
import torch.nn as nn


class DeepSets(nn.Module):
    def __init__(self, d_in=6, d=32, classes=4):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(d_in, d), nn.ReLU(), nn.Linear(d, d))
        self.rho = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, classes))

    def forward(self, sets):
        elems = torch.vmap(self.phi)(sets)
        pooled = elems.sum(dim=1).detach()
        return self.rho(pooled)


model = DeepSets()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    sets, y = torch.randn(8, 10, 6), torch.randint(0, 4, (8,))
    loss = nn.functional.cross_entropy(model(sets), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
