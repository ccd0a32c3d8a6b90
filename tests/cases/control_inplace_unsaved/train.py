"""In-place ops that are safe: on fresh buffers, on outputs not saved for backward, under no_grad."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 2)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        x = x.clone()
        x[:, 0] = 0.0  # a fresh copy of the input: nothing saved it
        h = self.fc1(x)
        h = self.act(h)  # linear's output is not needed by its backward
        h = h + 1
        h.mul_(0.5)  # the output of an add: nothing saved it
        return self.fc2(h)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.no_grad():
    model.fc2.weight.mul_(0.1)  # init under no_grad
for _ in range(3):
    x, y = torch.randn(8, 6), torch.randint(0, 2, (8,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
