"""A weight-decay split that forgot its second group: the filter meant to exempt biases and
LayerNorm weights from decay drops them from the optimizer altogether. One cause (the filter's
line), however many modules it drops."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(d)
        self.dense = nn.Linear(d, d)

    def forward(self, x):
        return x + self.dense(self.LayerNorm(x))


class Encoder(nn.Module):
    def __init__(self, d=16, n=4):
        super().__init__()
        self.embed = nn.Linear(8, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def build_optimizer(model, lr=1e-3, weight_decay=0.01):
    no_decay = ["bias", "LayerNorm.weight"]
    groups = [
        {
            "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
            "weight_decay": weight_decay,
        },
    ]
    return torch.optim.AdamW(groups, lr=lr)


torch.manual_seed(0)
model = Encoder()
optimizer = build_optimizer(model)
for step in range(3):
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
