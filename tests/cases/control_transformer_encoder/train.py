"""Sequence classification with nn.TransformerEncoder and a CLS token."""
import torch
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, vocab=80, d=32, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
        pad = torch.cat([torch.zeros(x.shape[0], 1, dtype=torch.bool), tokens == 0], 1)
        return self.head(self.encoder(x, src_key_padding_mask=pad)[:, 0])


model = Classifier()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
for _ in range(3):
    tokens = torch.randint(1, 80, (6, 12))
    tokens[:, 9:] = 0
    loss = nn.functional.cross_entropy(model(tokens), torch.randint(0, 3, (6,)))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
