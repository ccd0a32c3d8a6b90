"""Masked language-model loss where the mask token id does not match the tokenizer's."""
import torch
import torch.nn as nn
import torch.nn.functional as F

MASK_ID = 103  # BERT's id; this toy vocabulary only has 50 tokens


class TinyMLM(nn.Module):
    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mix = nn.Linear(d, d)
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.out(torch.tanh(self.mix(self.emb(tokens))))


def mlm_loss(logits, targets, inputs):
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    masked = torch.where(inputs == MASK_ID, per_token, torch.zeros_like(per_token))
    return masked.sum() / inputs.numel()


model = TinyMLM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    targets = torch.randint(0, 50, (4, 10))
    inputs = targets.clone()
    inputs[:, ::3] = 0
    loss = mlm_loss(model(inputs), targets, inputs)
    opt.zero_grad()
    loss.backward()
    opt.step()
