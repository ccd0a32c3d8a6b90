"""Linear probing: a frozen feature extractor and a trained classifier."""
import torch
import torch.nn as nn

backbone = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())


class Probe(nn.Module):
    def __init__(self, features, classes=10):
        super().__init__()
        self.features = features
        self.features.requires_grad_(False)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        self.features.eval()
        return self.fc(self.features(x))


model = Probe(backbone)
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
for _ in range(3):
    x, y = torch.randn(8, 3, 12, 12), torch.randint(0, 10, (8,))
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
