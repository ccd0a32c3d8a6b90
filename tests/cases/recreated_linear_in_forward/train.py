"""Feature fusion with a projection created on the fly when dimensions differ."""
import torch
import torch.nn as nn


class Fusion(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.dim = dim
        self.img = nn.Linear(32, dim)
        self.classifier = nn.Linear(dim, 2)

    def align(self, x):
        if x.shape[-1] != self.dim:
            x = nn.Linear(x.shape[-1], self.dim)(x)
        return x

    def forward(self, img_feats, audio_feats):
        fused = self.img(img_feats) + self.align(audio_feats)
        return self.classifier(torch.relu(fused))


model = Fusion()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    img, audio = torch.randn(8, 32), torch.randn(8, 10)
    y = torch.randint(0, 2, (8,))
    loss = nn.functional.cross_entropy(model(img, audio), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
