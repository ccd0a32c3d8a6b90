"""Gradient accumulation over a checkpointed MLP stack (`use_reentrant=False`, the library
default): the blocks' forwards run again inside backward. A memory-saving helper meant to run
after the step runs before it and clears the gradients of every trained parameter, so
nothing is updated."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Residual(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(F.silu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, d_in=12, d=16, depth=2, classes=3):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList(Residual(d) for _ in range(depth))
        self.out = nn.Linear(d, classes)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = checkpoint(block, h, use_reentrant=False)
        return self.out(h)


def release_gradients(model):
    for p in model.parameters():
        p.grad = None


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
accumulate = 2
for i in range(3 * accumulate):
    x, y = torch.randn(8, 12), torch.randint(0, 3, (8,))
    loss = F.cross_entropy(model(x), y) / accumulate
    loss.backward()
    if (i + 1) % accumulate == 0:
        release_gradients(model)
        optimizer.step()
