"""Per-sample weighting computed from a per-sample score list built with .item()."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 1)

    def forward(self, x):
        return torch.sigmoid(self.fc(x)).squeeze(-1)


def weighted_loss(logits, targets, scores):
    weights = torch.tensor([s.item() for s in scores])
    return (weights * F.cross_entropy(logits, targets, reduction="none")).mean()


classifier = nn.Linear(12, 3)
scorer = Scorer()
opt = torch.optim.Adam(list(classifier.parameters()) + list(scorer.parameters()), lr=1e-3)
for _ in range(3):
    x, y = torch.randn(7, 12), torch.randint(0, 3, (7,))
    loss = weighted_loss(classifier(x), y, scorer(x))
    opt.zero_grad()
    loss.backward()
    opt.step()
