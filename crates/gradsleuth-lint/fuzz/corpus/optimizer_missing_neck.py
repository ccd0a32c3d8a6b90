"""Detector-style model: backbone, neck and head, with per-part learning rates."""
import torch
import torch.nn as nn


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU())

    def forward(self, x):
        return self.layers(x)


class Detector(nn.Module):
    def __init__(self, n_anchors=3, n_classes=4):
        super().__init__()
        self.backbone = Backbone()
        self.neck = nn.Sequential(nn.Conv2d(32, 32, 1), nn.BatchNorm2d(32), nn.ReLU())
        self.head = nn.Conv2d(32, n_anchors * (n_classes + 4), 1)

    def forward(self, x):
        return self.head(self.neck(self.backbone(x)))


def build_optimizer(model, base_lr=1e-3):
    groups = [
        {"params": model.backbone.parameters(), "lr": base_lr * 0.1},
        {"params": model.head.parameters(), "lr": base_lr},
    ]
    return torch.optim.SGD(groups, lr=base_lr, momentum=0.9)


model = Detector()
optimizer = build_optimizer(model)
for step in range(3):
    images = torch.randn(4, 3, 32, 32)
    target = torch.randn(4, 24, 8, 8)
    loss = nn.functional.smooth_l1_loss(model(images), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
