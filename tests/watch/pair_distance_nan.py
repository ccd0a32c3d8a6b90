"""Metric learning with a contrastive loss on Euclidean distances, written by hand in the loss
function: `torch.sqrt(((a - b) ** 2).sum(-1))`. The pair sampler draws a positive from the same
class and, once classes run short, may draw the anchor itself: the pair's distance is exactly
0, the forward is finite (sqrt(0) = 0), and sqrt's backward divides by it. The NaN is born in
the loss, outside the model."""

import sys

import torch
import torch.nn as nn


class Embedder(nn.Module):
    def __init__(self, d_in=10, d=8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 32), nn.ReLU(), nn.Linear(32, d))

    def forward(self, x):
        return self.net(x)


def contrastive_loss(za, zp, zn, margin=1.0):
    d_pos = torch.sqrt(((za - zp) ** 2).sum(-1))
    d_neg = torch.sqrt(((za - zn) ** 2).sum(-1) + 1e-9)
    return (d_pos + torch.relu(margin - d_neg)).mean()


class ContrastiveLoss(nn.Module):
    """The same loss written as a module (`--loss-module`), as many codebases do."""

    def forward(self, za, zp, zn):
        return contrastive_loss(za, zp, zn)


def pairs(step, data, g):
    anchor = torch.randint(0, len(data), (16,), generator=g)
    positive = (anchor + 1) % len(data)
    if step >= 30:
        positive[3] = anchor[3]  # the sampler ran out of other members of that class
    negative = torch.randint(0, len(data), (16,), generator=g)
    return data[anchor], data[positive], data[negative]


def main():
    criterion = ContrastiveLoss() if "--loss-module" in sys.argv else contrastive_loss
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = torch.randn(64, 10, generator=g)
    model = Embedder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(1, 41):
        a, p, n = pairs(step, data, g)
        loss = criterion(model(a), model(p), model(n))
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
