"""gradsleuth demo: a multi-task tabular classifier that trains, reports a finite loss,
and yet has three silent bugs that keep parts of it from ever learning:

1. the per-task heads live in a plain Python list, so `model.parameters()` misses them;
2. the auxiliary reconstruction decoder is built but never called in `forward`;
3. the optimizer is created before the classifier is swapped for a 4-class one.

The pretrained feature embedding is frozen on purpose and left out of the optimizer.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)


class FeatureEncoder(nn.Module):
    def __init__(self, n_features, hidden):
        super().__init__()
        self.embed = nn.Linear(n_features, hidden)
        self.blocks = nn.Sequential(
            nn.LayerNorm(hidden),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
        )

    def forward(self, x):
        h = self.embed(x)
        return h + self.blocks(h)


class MultiTaskNet(nn.Module):
    def __init__(self, n_features=16, hidden=32, task_classes=(3, 5)):
        super().__init__()
        self.encoder = FeatureEncoder(n_features, hidden)
        self.task_heads = [nn.Linear(hidden, n) for n in task_classes]
        self.aux_decoder = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_features))
        self.classifier = nn.Linear(hidden, 2)

    def forward(self, x):
        h = self.encoder(x)
        task_logits = [head(h) for head in self.task_heads]
        return self.classifier(h), task_logits


def make_data(n=256, n_features=16):
    x = torch.randn(n, n_features)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long() * 2
    tasks = [(x[:, 2] * 3).long().clamp(0, 2), (x[:, 3] * 5).long().clamp(0, 4)]
    return TensorDataset(x, y, *tasks)


def main():
    model = MultiTaskNet()
    for p in model.encoder.embed.parameters():  # pretrained: keep frozen
        p.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.classifier = nn.Linear(32, 4)  # the label set grew to 4 classes
    loader = DataLoader(make_data(), batch_size=32, shuffle=True)
    for epoch in range(2):
        for x, y, t0, t1 in loader:
            optimizer.zero_grad()
            logits, (l0, l1) = model(x)
            loss = F.cross_entropy(logits, y) + 0.5 * (F.cross_entropy(l0, t0) + F.cross_entropy(l1, t1))
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
