"""A two-stage detector trained in the style of torchvision's detection reference loop: the
proposal branch is detached by design (its boxes only pick regions for the box head), the model
returns a dict of losses, a helper sums them, and the loop reads the total with `.item()` for a
finite check before backward. The helper detaches the total (copied from logging code), so
backward refuses it: the detach in the helper is the cause, not the proposals' detach and not
the `.item()`."""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.proposal = nn.Linear(32, 4)
        self.box_head = nn.Linear(32 + 4, 3)

    def forward(self, x, labels):
        feats = self.backbone(x)
        objectness = self.proposal(feats)
        proposals = objectness.detach().sigmoid()
        logits = self.box_head(torch.cat([feats, proposals], dim=1))
        return {
            "loss_objectness": objectness.pow(2).mean(),
            "loss_classifier": F.cross_entropy(logits, labels),
        }


def total_loss(loss_dict):
    losses = sum(loss for loss in loss_dict.values())
    return losses.detach()


torch.manual_seed(0)
model = TwoStage()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=1e-4)
for step in range(3):
    x = torch.randn(8, 16)
    labels = torch.randint(0, 3, (8,))
    losses = total_loss(model(x, labels))
    loss_value = losses.item()
    if not math.isfinite(loss_value):
        print(f"Loss is {loss_value}, stopping training")
        sys.exit(1)
    optimizer.zero_grad()
    losses.backward()
    optimizer.step()
