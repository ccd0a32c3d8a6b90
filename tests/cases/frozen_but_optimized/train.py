"""Fine-tuning: meant to unfreeze the last stage, but the name test never matches."""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.stage2 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.classifier = nn.Linear(8, 4)

    def forward(self, x):
        return self.classifier(self.stage2(self.stage1(x)).mean((2, 3)))


model = Net()
for name, p in model.named_parameters():
    p.requires_grad = name.startswith("layer4") or name.startswith("classifier")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 4, (4,))
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
