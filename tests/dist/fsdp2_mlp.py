"""FSDP2 (`fully_shard`) on CPU: each block sharded, then the whole model (control; `--cut`
detaches each block's norm from what follows)."""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, d, cut=False):
        super().__init__()
        self.cut = cut
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        h = self.norm(x)
        if self.cut:
            h = h.detach()  # the bug `--cut` plants: the norms never learn
        self.calls = getattr(self, "calls", 0) + 1
        if "--nan" in sys.argv and self.calls == 2:
            h = torch.sqrt(h - 10)  # `--nan` plants a NaN in the second step's forward
        return x + self.ff(h)


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    cut = "--cut" in sys.argv
    model = nn.Sequential(nn.Linear(8, 16), Block(16, cut), Block(16, cut), nn.Linear(16, 1))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(4):
        x = torch.randn(4, 8)
        loss = (model(x).squeeze(-1) - x.sum(-1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
