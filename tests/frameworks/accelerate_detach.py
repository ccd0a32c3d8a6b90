"""accelerate: a training loop prepared by Accelerator, started by `accelerate launch`; the
encoder's output is detached before the head."""
import torch
from accelerate import Accelerator
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        h = self.encoder(x).detach()
        return self.head(h)


def main():
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    for _ in range(4):
        x = torch.randn(8, 8)
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
    accelerator.print("done")


if __name__ == "__main__":
    main()
