"""Lightning Fabric: a loop set up by `fabric.setup`, started by `fabric run` on two CPU
processes (Fabric re-executes the script for rank 1). The optimizer is built over the encoder
only: the head gets gradients and never moves."""
import torch
from lightning.fabric import Fabric
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    fabric = Fabric()
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.encoder.parameters(), lr=0.1)
    model, opt = fabric.setup(model, opt)
    for _ in range(4):
        loss = model(torch.randn(8, 8)).pow(2).mean()
        fabric.backward(loss)
        opt.step()
        opt.zero_grad()
    fabric.print("done")


if __name__ == "__main__":
    main()
