"""Fine-tuning a pretrained classifier for a new label set."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


def adapt_to_new_classes(model, n_classes):
    model.fc = nn.Linear(model.fc.in_features, n_classes)
    return model


model = SmallCNN()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
model = adapt_to_new_classes(model, 3)
for epoch in range(3):
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 3, (8,))
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
