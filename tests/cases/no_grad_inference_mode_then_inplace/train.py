"""A residual block wraps its stochastic-depth call in `torch.inference_mode()` (copied from an
evaluation path); the residual add that follows is in place, so torch refuses it ("Inplace update
to inference tensor outside InferenceMode") before any backward."""
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = self.fc(x) * self.scale
        with torch.inference_mode():
            h = h * (torch.rand(h.shape[0], 1) > 0.1)
        h += x
        return h


torch.manual_seed(0)
model = nn.Sequential(Block(8), Block(8), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
