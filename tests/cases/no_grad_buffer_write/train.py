"""Instance discrimination with a memory bank: each batch's embeddings are written into the
bank under `torch.no_grad()` (right: the bank is a running store), but the logits are then
computed from the bank's rows (`bank[idx]`) instead of the fresh embeddings. The write made
without recording leaves those rows without history: the prototypes learn, the encoder never
does."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
n_items, dim = 64, 16
encoder = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, dim))
prototypes = nn.Linear(dim, 8, bias=False)
bank = torch.zeros(n_items, dim)
data = torch.randn(n_items, 10)
labels = torch.randint(0, 8, (n_items,))
opt = torch.optim.SGD([*encoder.parameters(), *prototypes.parameters()], lr=0.1)
for step in range(5):
    idx = torch.randperm(n_items)[:16]
    emb = F.normalize(encoder(data[idx]), dim=1)
    with torch.no_grad():
        bank[idx] = emb
    logits = prototypes(bank[idx])
    loss = F.cross_entropy(logits, labels[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
