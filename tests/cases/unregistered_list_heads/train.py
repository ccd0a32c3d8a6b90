"""Multi-label image tagger: one small head per attribute group."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvTrunk(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width * 2, 3, padding=1, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.pool(x).flatten(1)


class Tagger(nn.Module):
    def __init__(self, groups=(4, 6, 3)):
        super().__init__()
        self.trunk = ConvTrunk()
        self.heads = [nn.Linear(32, n) for n in groups]

    def forward(self, images):
        feats = self.trunk(images)
        return [head(feats) for head in self.heads]


def batches(n_steps, groups=(4, 6, 3)):
    g = torch.Generator().manual_seed(0)
    for _ in range(n_steps):
        x = torch.randn(8, 3, 16, 16, generator=g)
        ys = [torch.randint(0, 2, (8, n), generator=g).float() for n in groups]
        yield x, ys


model = Tagger()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for x, ys in batches(5):
    opt.zero_grad()
    logits = model(x)
    loss = sum(F.binary_cross_entropy_with_logits(l, y) for l, y in zip(logits, ys))
    loss.backward()
    opt.step()
print("done", float(loss))
