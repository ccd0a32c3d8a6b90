"""DDP training where one rank's data pipeline stalls (a read that never returns, as on a hung
network filesystem): the other rank waits in the gradient all-reduce forever."""

import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class RemoteShards(Dataset):
    """Samples fetched from remote storage; sample 13 sits on a server that stopped answering."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 13:
            time.sleep(3600)  # the read that never returns
        g = torch.Generator().manual_seed(i)
        return torch.randn(10, generator=g), torch.randn(1, generator=g)


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = RemoteShards()
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=False))
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
