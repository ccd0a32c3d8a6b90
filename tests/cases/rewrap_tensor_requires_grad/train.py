"""A classifier that keeps a token saliency map: the embedding output is re-made with
torch.tensor(..., requires_grad=True) so that its .grad can be read after backward, which
also cuts the embedding off the loss."""
import torch
import torch.nn as nn

emb = nn.Embedding(100, 32)
clf = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(list(emb.parameters()) + list(clf.parameters()), lr=1e-3)

for _ in range(3):
    tokens, y = torch.randint(0, 100, (8, 12)), torch.randint(0, 2, (8,))
    e = emb(tokens)
    e = torch.tensor(e, requires_grad=True)
    loss = nn.functional.cross_entropy(clf(e.mean(1)), y)
    opt.zero_grad()
    loss.backward()
    saliency = e.grad.abs().sum(-1)
    opt.step()
print(saliency.shape)
