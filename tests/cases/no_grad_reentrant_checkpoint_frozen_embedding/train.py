"""Adapters on a frozen text model, its blocks checkpointed the old (reentrant) way. The frozen
embedding's output does not require grad, so each checkpointed block runs without recording:
torch warns once, and the adapters never train."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Adapter(nn.Module):
    def __init__(self, d, r=4):
        super().__init__()
        self.down = nn.Linear(d, r, bias=False)
        self.up = nn.Linear(r, d, bias=False)

    def forward(self, x):
        return x + self.up(self.down(x))


class Encoder(nn.Module):
    def __init__(self, vocab=50, d=32, depth=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.GELU(), Adapter(d)) for _ in range(depth))
        self.head = nn.Linear(d, 2)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True)
        return self.head(x.mean(1))


model = Encoder()
for name, p in model.named_parameters():
    p.requires_grad_("up" in name or "down" in name or name.startswith("head"))
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for _ in range(3):
    ids = torch.randint(0, 50, (4, 6))
    loss = nn.functional.cross_entropy(model(ids), torch.randint(0, 2, (4,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
