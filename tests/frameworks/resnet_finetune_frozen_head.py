"""Fine-tuning torchvision's ResNet-18 from a checkpoint: the classifier is replaced by a new
10-class head, and a name filter meant to train only the last stage also freezes that new head.
It stays at its random initialisation while `layer4` trains through it."""
import os
import tempfile

import torch
from torch import nn
from torchvision.models import resnet18

torch.manual_seed(0)
checkpoint = os.path.join(tempfile.mkdtemp(), "resnet18.pt")
torch.save(resnet18(num_classes=1000).state_dict(), checkpoint)  # stands in for the pretrained file

model = resnet18()
model.load_state_dict(torch.load(checkpoint))
model.fc = nn.Linear(model.fc.in_features, 10)
for name, p in model.named_parameters():
    if not name.startswith("layer4"):
        p.requires_grad = False
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01, momentum=0.9)
for _ in range(3):
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
