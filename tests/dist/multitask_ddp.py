"""Multi-task DDP training: an auxiliary regression head only runs on batches that contain the
rare class. The dataset keeps the rare class at even indices, so DistributedSampler gives it
to rank 0 only: on rank 1 the head never runs."""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

RARE = 3


class MultiTask(nn.Module):
    def __init__(self, d_in=16, d=32, classes=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.cls = nn.Linear(d, classes)
        self.aux = nn.Linear(d, 1)

    def forward(self, x, y):
        h = self.body(x)
        loss = F.cross_entropy(self.cls(h), y)
        if (y == RARE).any():
            loss = loss + 0.1 * self.aux(h[y == RARE]).pow(2).mean()
        return loss


def make_data(n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g)
    y = torch.randint(0, RARE, (n,), generator=g)
    y[::4] = RARE  # indices 0, 4, 8, ...: all even
    return TensorDataset(x, y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--find-unused", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(MultiTask(), find_unused_parameters=args.find_unused)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = make_data()
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    if dist.get_rank() == 0:
        print(f"final loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
