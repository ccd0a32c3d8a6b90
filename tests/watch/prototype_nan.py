"""Sequence classifier with a hand-written magnitude feature: each token's projection and its
L2 length, `torch.sqrt((h ** 2).sum(-1))`. Padding tokens are all-zero rows and the projection
has no bias, so a padded batch gives a length of exactly 0: the forward is fine (sqrt(0) = 0),
but sqrt's backward divides by it and the gradients turn NaN, after which Adam makes every
weight NaN."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class MagnitudeClassifier(nn.Module):
    def __init__(self, d_in=12, d=16, classes=3):
        super().__init__()
        self.proj = nn.Linear(d_in, d, bias=False)
        self.mix = nn.Sequential(nn.Linear(d + 1, d), nn.GELU())
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        h = self.proj(tokens)  # (batch, seq, d)
        length = torch.sqrt((h**2).sum(-1, keepdim=True))
        h = self.mix(torch.cat([h, length], dim=-1))
        return self.head(h.mean(dim=1))


def batches(steps, pad_from):
    g = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        x = torch.randn(8, 6, 12, generator=g)
        if step >= pad_from:
            x[:, -1] = 0.0  # the loader started padding sequences to a fixed length
        yield step, x, torch.randint(0, 3, (8,), generator=g)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--pad-from", type=int, default=25)
    args = p.parse_args()
    torch.manual_seed(0)
    model = MagnitudeClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _step, x, y in batches(args.steps, args.pad_from):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
