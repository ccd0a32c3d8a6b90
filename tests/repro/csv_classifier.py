"""Trains a small classifier on features stored as CSV (a user's script, not a test's shape)."""
from __future__ import annotations

import argparse
import csv
import logging
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("train")


class CsvFeatures(Dataset):
    def __init__(self, path, scale=1.0):
        with open(path) as f:
            rows = [list(map(float, r)) for r in csv.reader(f)]
        self.x = torch.tensor([r[:-1] for r in rows]) * scale
        self.y = torch.tensor([int(r[-1]) for r in rows])

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Classifier(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, 32))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        h = self.encoder(x)
        return self.head(h.detach())


def evaluate(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(-1) == y).sum().item()
    model.train()
    return correct / len(loader.dataset)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="data")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--out", default="ckpt")
    args = p.parse_args()
    train = CsvFeatures(os.path.join(args.data, "train.csv"))
    val = CsvFeatures(os.path.join(args.data, "val.csv"))
    loader = DataLoader(train, batch_size=16, shuffle=True)
    model = Classifier(train.x.shape[1], 5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    os.makedirs(args.out, exist_ok=True)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if step % 10 == 0:
                log.info("epoch %d step %d loss %.3f", epoch, step, loss.item())
        acc = evaluate(model, DataLoader(val, batch_size=64))
        torch.save(model.state_dict(), os.path.join(args.out, f"epoch{epoch}.pt"))
        print(f"epoch {epoch}: val acc {acc:.3f}")


if __name__ == "__main__":
    main()
