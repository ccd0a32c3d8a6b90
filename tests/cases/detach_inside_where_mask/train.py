"""Hard token selection: tokens whose score beats the mean are kept, the rest zeroed. The kept
features were detached (copied from a scoring-only variant), so the encoder never learns; the
comparison that builds the mask is not a second cause for the encoder, but it is the only
path from the scorer, which gets no gradient through it (a hard selection)."""
import torch
import torch.nn as nn


class Selector(nn.Module):
    def __init__(self, d=24):
        super().__init__()
        self.encoder = nn.Linear(d, d)
        self.scorer = nn.Linear(d, 1)
        self.head = nn.Linear(d, 2)

    def forward(self, tokens):
        feats = torch.tanh(self.encoder(tokens))
        scores = self.scorer(feats)
        keep = scores > scores.mean(dim=1, keepdim=True)
        kept = torch.where(keep, feats.detach(), torch.zeros_like(feats))
        return self.head(kept.mean(dim=1))


model = Selector()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    tokens, y = torch.randn(8, 10, 24), torch.randint(0, 2, (8,))
    loss = nn.functional.cross_entropy(model(tokens), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
