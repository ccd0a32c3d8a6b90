"""Segmentation-style model with a deep-supervision auxiliary head used only on some steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.body = nn.Conv2d(8, 16, 3, padding=1)
        self.head = nn.Conv2d(16, classes, 1)
        self.aux_head = nn.Conv2d(8, classes, 1)

    def forward(self, x, deep_supervision=False):
        s = F.relu(self.stem(x))
        out = self.head(F.relu(self.body(s)))
        if deep_supervision:
            return out, self.aux_head(s)
        return out, None


model = Net()
optim = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(3):
    img = torch.randn(2, 3, 8, 8)
    mask = torch.randint(0, 3, (2, 8, 8))
    out, aux = model(img, deep_supervision=(step % 2 == 0))
    loss = F.cross_entropy(out, mask)
    if aux is not None:
        loss = loss + 0.4 * F.cross_entropy(aux, mask)
    optim.zero_grad()
    loss.backward()
    optim.step()
