"""Sequence tagger trained with AMP; the padding mask is built from the wrong lengths."""
import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_LEN = 12


class Tagger(nn.Module):
    def __init__(self, vocab=30, d=16, tags=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.GRU(d, d, batch_first=True)
        self.out = nn.Linear(d, tags)

    def forward(self, x):
        return self.out(self.rnn(self.emb(x))[0])


def masked_token_loss(logits, tags, lengths):
    per_token = F.cross_entropy(logits.transpose(1, 2), tags, reduction="none")
    mask = torch.arange(MAX_LEN)[None, :] > lengths[:, None]  # meant: <
    mask = mask & (lengths[:, None] > MAX_LEN)  # keep only real sequences
    return (per_token * mask).sum() / mask.sum()


model = Tagger()
opt = torch.optim.Adam(model.parameters(), 1e-3)
scaler = torch.amp.GradScaler("cpu")
for step in range(3):
    x = torch.randint(0, 30, (4, MAX_LEN))
    tags = torch.randint(0, 5, (4, MAX_LEN))
    lengths = torch.randint(3, MAX_LEN, (4,))
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = masked_token_loss(model(x), tags, lengths)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
