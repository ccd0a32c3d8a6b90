"""FSDP1 (`FullyShardedDataParallel`) on CPU, each block wrapped, then the whole model
(control). `--orig-params` passes `use_orig_params=True`: the original parameters are views of
this rank's shard of the flat parameter (empty where the values live on the other rank);
without it the model's parameters are replaced by FSDP's flat parameters and the layers' weights
by views of them, refreshed at every forward. `--cut` detaches each block's norm from what
follows."""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


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
    orig = "--orig-params" in sys.argv
    cpu = torch.device("cpu")
    model = nn.Sequential(nn.Linear(8, 16), Block(16, cut), Block(16, cut), nn.Linear(16, 1))
    for i in (1, 2):
        model[i] = FSDP(model[i], device_id=cpu, use_orig_params=orig)
    model = FSDP(model, device_id=cpu, use_orig_params=orig)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(4):
        x = torch.randn(4, 8)
        loss = (model(x).squeeze(-1) - x.sum(-1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
