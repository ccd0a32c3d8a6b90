"""Custom initialisation done in place outside torch.no_grad()."""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def init_weights(model):
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.weight.mul_(0.5)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(3, 4)
model(x)  # warm-up forward
init_weights(model)
for _ in range(3):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
