"""A small causal LM trained on a padded batch, called the way Hugging Face models are:
`model(input_ids=..., attention_mask=...)`. The collator leaves one row of the very first batch
all padding, so its attention mask is all False: every score of that row is -inf and the
softmax of a row of -inf is NaN, in the forward pass of step 1."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, attention_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(~attention_mask[:, None, None, :], float("-inf"))
        probs = scores.softmax(dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, t, d))


class TinyLM(nn.Module):
    def __init__(self, vocab=50, d=32, heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.attn = SelfAttention(d, heads)
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab)

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids)
        x = x + self.attn(x, attention_mask=attention_mask)
        return self.lm_head(self.norm(x))


def collate(step, g):
    ids = torch.randint(1, 50, (4, 12), generator=g)
    mask = torch.ones(4, 12, dtype=torch.bool)
    if step == 1:
        mask[2] = False  # an empty document, padded to the batch length
    return ids, mask


torch.manual_seed(0)
model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
for step in range(1, 9):
    input_ids, attention_mask = collate(step, g)
    logits = model(input_ids=input_ids, attention_mask=attention_mask)
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
