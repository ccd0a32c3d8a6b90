"""A small GPT: token and position embeddings, pre-norm blocks of causal self-attention
(scaled_dot_product_attention) and a GELU MLP, a head tied to the token embedding, AdamW with
weight decay on matrices only, a cosine learning rate with warm-up, gradient clipping."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _timing import iterations

vocab, block, n_embd, n_head, n_layer = 512, 64, 128, 4, 4


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        self.h = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, vocab), targets.view(-1))


def lr_at(it, warmup=5, total=30, top=6e-4):
    if it < warmup:
        return top * (it + 1) / warmup
    return top * 0.5 * (1 + math.cos(math.pi * (it - warmup) / (total - warmup)))


torch.manual_seed(1)
model = GPT()
params = [p for p in model.parameters() if p.requires_grad]
groups = [
    {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
    {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95))
text = torch.randint(0, vocab, (20000,))
for i in iterations(30):
    ix = torch.randint(len(text) - block - 1, (16,))
    x = torch.stack([text[j : j + block] for j in ix])
    y = torch.stack([text[j + 1 : j + 1 + block] for j in ix])
    for g in optimizer.param_groups:
        g["lr"] = lr_at(i)
    loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
print(f"loss {loss.item():.3f}")
