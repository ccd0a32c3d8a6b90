"""A correct DDP classifier (control): every module runs on every rank in every step. With
`--cut` the features are detached before the head, which DDP fails on in the next step."""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(20, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 32), nn.GELU())
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        h = self.features(x)
        if "--cut" in sys.argv:
            h = h.detach()  # the cut
        return self.head(h)


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(Classifier())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(96, 20, generator=g), torch.randint(0, 5, (96,), generator=g))
    loader = DataLoader(data, batch_size=12, sampler=DistributedSampler(data))
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
