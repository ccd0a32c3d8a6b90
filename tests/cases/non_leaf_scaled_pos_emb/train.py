"""Vision-transformer-ish patch classifier; position embedding initialised with a scale."""
import torch
import torch.nn as nn


class PatchClassifier(nn.Module):
    def __init__(self, img=16, patch=4, d=32, classes=5):
        super().__init__()
        n = (img // patch) ** 2
        self.to_patches = nn.Conv2d(1, d, patch, stride=patch)
        self.pos_embedding = nn.Parameter(torch.randn(1, n, d)) * 0.02
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 64, batch_first=True), 1)
        self.fc = nn.Linear(d, classes)

    def forward(self, x):
        tokens = self.to_patches(x).flatten(2).transpose(1, 2)
        h = self.encoder(tokens + self.pos_embedding)
        return self.fc(h.mean(1))


model = PatchClassifier()
opt = torch.optim.Adam(model.parameters(), 1e-3)
for i in range(3):
    x, y = torch.randn(6, 1, 16, 16), torch.randint(0, 5, (6,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
