"""Attention mask applied with an in-place masked_fill_ on softmax probabilities."""
import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)

    def forward(self, x, pad):
        scores = self.q(x) @ self.k(x).transpose(1, 2)
        probs = scores.softmax(-1)
        probs.masked_fill_(pad[:, None, :], 0.0)
        return probs @ x


att = Attention()
head = nn.Linear(8, 1)
opt = torch.optim.Adam(list(att.parameters()) + list(head.parameters()))
for _ in range(2):
    x = torch.randn(2, 5, 8)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[:, -1] = True
    loss = head(att(x, pad)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
