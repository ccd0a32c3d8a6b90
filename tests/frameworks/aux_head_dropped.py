"""Bug: an auxiliary head is computed every step, but its loss term was never added: its
output is dropped and it never learns."""
import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 1)
        self.aux = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        h = torch.relu(self.body(x))
        aux_logits = self.aux(h)
        return self.head(h), aux_logits


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    out, aux = model(torch.randn(8, 8))
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
