"""Gradient accumulation over 4 micro-batches, with zero_grad inside the inner loop."""
import torch
import torch.nn as nn
import torch.nn.functional as F

ACCUM = 4


class TextCNN(nn.Module):
    def __init__(self, vocab=100, d=16, classes=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.conv = nn.Conv1d(d, 32, 3, padding=1)
        self.fc = nn.Linear(32, classes)

    def forward(self, tokens):
        h = self.emb(tokens).transpose(1, 2)
        return self.fc(F.relu(self.conv(h)).max(-1).values)


model = TextCNN()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for i in range(12):
    tokens = torch.randint(0, 100, (4, 20))
    labels = torch.randint(0, 2, (4,))
    loss = F.cross_entropy(model(tokens), labels) / ACCUM
    loss.backward()
    optimizer.zero_grad()
    if (i + 1) % ACCUM == 0:
        optimizer.step()
