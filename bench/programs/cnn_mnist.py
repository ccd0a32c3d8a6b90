"""An MNIST-style classifier: two convolutions, dropout, two linear layers, log-softmax and NLL,
Adadelta with a step learning-rate schedule (the shape of the classic PyTorch example), on
random 28x28 digits."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _timing import iterations
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


torch.manual_seed(1)
model = Net()
optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
scheduler = StepLR(optimizer, step_size=10, gamma=0.7)
data = [(torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))) for _ in range(8)]
model.train()
for i in iterations(30):
    x, target = data[i % len(data)]
    optimizer.zero_grad()
    loss = F.nll_loss(model(x), target)
    loss.backward()
    optimizer.step()
    scheduler.step()
print(f"loss {loss.item():.4f}")
