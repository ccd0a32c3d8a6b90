"""A small training job written as a main() function, with argparse and a tuned AdamW; the
features are detached before the head."""
import argparse

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 32), nn.ReLU())
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        h = self.body(x)
        return self.head(h.detach())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Net(10)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.99))
    for epoch in range(args.epochs):
        for _ in range(3):
            x, y = torch.randn(8, 10), torch.randint(0, 2, (8,))
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("epoch", epoch, loss.item())


if __name__ == "__main__":
    main()
