"""Fine-tuning: a name filter meant to train only the new neck also freezes the new classifier."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(12, 24), nn.ReLU())
        self.neck = nn.Linear(24, 24)
        self.classifier = nn.Linear(24, 4)

    def forward(self, x):
        return self.classifier(torch.relu(self.neck(self.backbone(x))))


def freeze_pretrained(model, trainable=("neck",)):
    for name, param in model.named_parameters():
        param.requires_grad = name.startswith(trainable)


model = Net()
freeze_pretrained(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    x, y = torch.randn(16, 12), torch.randint(0, 4, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
