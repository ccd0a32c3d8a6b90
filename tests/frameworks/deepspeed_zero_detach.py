"""DeepSpeed ZeRO on CPU (stage 2, or `--stage N`), started by the `deepspeed` launcher: the
engine's optimizer updates flat partitions of the parameters, and `.grad` is None by design.
The encoder's output is detached before the head."""
import sys

import deepspeed
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.encoder(x).detach())


torch.manual_seed(0)
model = Net()
config = {
    "train_batch_size": 8,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
    "zero_optimization": {"stage": int(sys.argv[sys.argv.index("--stage") + 1]) if "--stage" in sys.argv else 2},
}
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
for _ in range(4):
    loss = engine(torch.randn(8, 8)).pow(2).mean()
    engine.backward(loss)
    engine.step()
