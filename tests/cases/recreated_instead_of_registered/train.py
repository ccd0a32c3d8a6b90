"""A token tagger whose forward builds a fresh output projection instead of calling the one
registered in __init__ (sizes read from it)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Tagger(nn.Module):
    def __init__(self, vocab=30, dim=16, tags=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Conv1d(dim, dim, 3, padding=1)
        self.tag_proj = nn.Linear(dim, tags)

    def forward(self, ids):
        h = self.mix(self.emb(ids).transpose(1, 2)).transpose(1, 2).relu()
        proj = nn.Linear(self.tag_proj.in_features, self.tag_proj.out_features)
        return proj(h)


model = Tagger()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(3):
    ids, tags = torch.randint(0, 30, (2, 7)), torch.randint(0, 5, (2, 7))
    loss = F.cross_entropy(model(ids).reshape(-1, 5), tags.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
