"""Class prototypes computed once before the loop and reused in every step's loss."""
import torch
import torch.nn as nn
import torch.nn.functional as F

encoder = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 8))
opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
support = torch.randn(3, 5, 10)
prototypes = encoder(support).mean(1)  # one prototype per class

for step in range(3):
    query, labels = torch.randn(6, 10), torch.randint(0, 3, (6,))
    logits = -torch.cdist(encoder(query), prototypes)
    loss = F.cross_entropy(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
