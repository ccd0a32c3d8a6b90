"""A training step whose caller put it under no_grad: the `with` is two calls above the model
call, and the model's ops run four modules deep, so no frame of theirs reaches the block."""
import torch
import torch.nn as nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp()

    def forward(self, x):
        return x + self.mlp(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.blocks(x))


def compute_loss(model, x, y):
    out = model(x)
    return (out - y).pow(2).mean()


def loss_of(model, batch):
    with torch.no_grad():
        loss = compute_loss(model, *batch)
    return loss


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    batch = (torch.randn(4, 8), torch.randn(4, 1))
    loss = loss_of(model, batch)
    opt.zero_grad()
    loss.backward()
    opt.step()
