"""Mixture of experts regressor with a learned router (experts kept in a dict)."""
import torch
import torch.nn as nn


def mlp(d_in, d_hidden, d_out):
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.SiLU(), nn.Linear(d_hidden, d_out))


class MoE(nn.Module):
    def __init__(self, d, names=("short", "long")):
        super().__init__()
        self.router = nn.Linear(d, len(names))
        self.names = list(names)
        self.experts = {name: mlp(d, 2 * d, 1) for name in names}

    def forward(self, x):
        weights = self.router(x).softmax(-1)
        outs = torch.cat([self.experts[n](x) for n in self.names], dim=-1)
        return (weights * outs).sum(-1)


class Regressor(nn.Module):
    def __init__(self, d_in=10, d=24):
        super().__init__()
        self.embed = nn.Linear(d_in, d)
        self.moe = MoE(d)

    def forward(self, x):
        return self.moe(torch.tanh(self.embed(x)))


def train(model, data, epochs=1):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.SmoothL1Loss()
    for _ in range(epochs):
        for x, y in data:
            pred = model(x)
            loss = loss_fn(pred, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return loss.item()


if __name__ == "__main__":
    torch.manual_seed(1)
    xs = torch.randn(64, 10)
    ys = xs[:, :3].sum(-1)
    data = list(zip(xs.split(16), ys.split(16)))
    print(train(Regressor(), data))
