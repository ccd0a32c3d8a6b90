"""A GRU language model trained on consecutive chunks: the hidden state is fed back
into the next chunk without being detached (truncated BPTT forgotten)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class CharLM(nn.Module):
    def __init__(self, vocab=20, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids, state=None):
        h, state = self.gru(self.emb(ids), state)
        return self.out(h), state


model = CharLM()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
stream = torch.randint(0, 20, (2, 41))
state = None
for start in range(0, 40, 8):
    ids, target = stream[:, start : start + 8], stream[:, start + 1 : start + 9]
    logits, state = model(ids, state)
    loss = F.cross_entropy(logits.reshape(-1, 20), target.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
