"""An image classifier whose pooled features are detached in place before the head, meant as
a feature-logging copy: `feats.detach_()` detaches the tensor itself, so the backbone is cut off."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(16, 10)
        self.logged = []

    def forward(self, x):
        feats = self.backbone(x).mean(dim=(2, 3))
        self.logged.append(feats.detach_())
        return self.head(feats)


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(6):
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
