"""A gated residual stack whose per-layer gates are nn.Parameters kept in a plain Python list:
the list is not registered, so `model.parameters()` (and the optimizer, `state_dict`,
`.to(device)`) never see the gates. Gradients reach them; nothing updates them."""
import torch
import torch.nn as nn


class GatedStack(nn.Module):
    def __init__(self, d=16, depth=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(depth)])
        self.gates = [nn.Parameter(torch.full((d,), 0.5)) for _ in range(depth)]
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        for layer, gate in zip(self.layers, self.gates):
            x = x + torch.tanh(gate) * torch.relu(layer(x))
        return self.head(x)


torch.manual_seed(0)
model = GatedStack()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(5):
    x = torch.randn(32, 16)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
