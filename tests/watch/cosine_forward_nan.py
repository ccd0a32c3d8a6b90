"""Metric-learning head with a hand-written cosine similarity: embeddings are normalised as
`z / z.norm(dim=-1, keepdim=True)`. A batch with an all-zero input row (a missing image,
zero-filled by the loader) gives a zero embedding (the encoder has no bias), and 0 / 0 is NaN
in the forward pass itself."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class CosineHead(nn.Module):
    def __init__(self, d_in=20, d=16, classes=5):
        super().__init__()
        self.encoder = nn.Linear(d_in, d, bias=False)
        self.class_vectors = nn.Parameter(torch.randn(classes, d))
        self.scale = 10.0

    def forward(self, x):
        z = self.encoder(x)
        z = z / z.norm(dim=-1, keepdim=True)
        w = F.normalize(self.class_vectors, dim=-1)
        return self.scale * z @ w.t()


torch.manual_seed(0)
model = CosineHead()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
g = torch.Generator().manual_seed(1)
for step in range(1, 41):
    x = torch.randn(10, 20, generator=g)
    y = torch.randint(0, 5, (10,), generator=g)
    if step == 15:
        x[4] = 0.0  # a missing sample, zero-filled
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
