"""Control: a layer that keeps a plain list of its own registered parameters (to hand them to
an optimizer group of their own): the list is an alias, not an unregistered parameter."""
import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d))
        self.shift = nn.Parameter(torch.zeros(d))
        self.gate_params = [self.scale, self.shift]

    def forward(self, x):
        return x * self.scale + self.shift


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.gate = Gate(8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.gate(torch.relu(self.body(x))))


torch.manual_seed(0)
model = Net()
rest = [p for n, p in model.named_parameters() if not n.startswith("gate.")]
opt = torch.optim.Adam([{"params": rest}, {"params": model.gate.gate_params, "lr": 1e-2}], lr=1e-3)
for _ in range(3):
    x, y = torch.randn(16, 6), torch.randint(0, 2, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
