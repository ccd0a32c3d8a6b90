"""Language model with tied input/output embeddings."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class TiedLM(nn.Module):
    def __init__(self, vocab=60, d=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rnn = nn.GRU(d, d, batch_first=True)
        self.decoder = nn.Linear(d, vocab, bias=False)
        self.decoder.weight = self.embed.weight

    def forward(self, tokens):
        h, _ = self.rnn(self.embed(tokens))
        return self.decoder(h)


model = TiedLM()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    seq = torch.randint(0, 60, (4, 11))
    logits = model(seq[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 60), seq[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
