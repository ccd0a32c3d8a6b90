"""Train with a validation pass under no_grad / eval after every step."""
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(6, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
xv, yv = torch.randn(20, 6), torch.randint(0, 3, (20,))


@torch.no_grad()
def validate(m):
    m.eval()
    acc = (m(xv).argmax(1) == yv).float().mean().item()
    m.train()
    return acc


for epoch in range(3):
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    print(epoch, validate(model))
