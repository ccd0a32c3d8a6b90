"""Feature selection with a learnable soft gate that was registered as a buffer."""
import torch
from torch import nn


class GatedMLP(nn.Module):
    def __init__(self, n_features=12, hidden=24):
        super().__init__()
        self.register_buffer("gate_logits", torch.zeros(n_features, requires_grad=True))
        self.mlp = nn.Sequential(nn.Linear(n_features, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.mlp(x * torch.sigmoid(self.gate_logits)).squeeze(-1)

    def sparsity(self):
        return torch.sigmoid(self.gate_logits).mean()


def fit(model, xs, ys, steps=4, l1=1e-2):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for i in range(steps):
        loss = nn.functional.mse_loss(model(xs), ys) + l1 * model.sparsity()
        opt.zero_grad()
        loss.backward()
        opt.step()


xs = torch.randn(64, 12)
fit(GatedMLP(), xs, xs[:, 0] * 2 - xs[:, 3])
