"""Vocabulary extension: the pretrained token embeddings are kept fixed by clearing their
gradient before every step, while the new head trains. Deliberate (if unidiomatic)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.encoder = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, ids):
        out, _ = self.encoder(self.embed(ids))
        return self.head(out)


torch.manual_seed(0)
model = Tagger()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(6):
    ids, tags = torch.randint(0, 100, (8, 12)), torch.randint(0, 5, (8, 12))
    loss = F.cross_entropy(model(ids).flatten(0, 1), tags.flatten())
    opt.zero_grad()
    loss.backward()
    model.embed.weight.grad = None  # keep the pretrained embeddings as they are
    opt.step()
