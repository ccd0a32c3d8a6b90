"""Set encoder: per-item embeddings gathered with torch.tensor instead of torch.stack."""
import torch
import torch.nn as nn


class ItemEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)

    def forward(self, item):
        return torch.tanh(self.fc(item))


class SetModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.item = ItemEncoder()
        self.pool_fc = nn.Linear(8, 1)

    def forward(self, items):
        embs = [self.item(x).tolist() for x in items]
        pooled = torch.tensor(embs).mean(0)
        return self.pool_fc(pooled)


model = SetModel()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    items = torch.randn(5, 6)
    loss = (model(items) - 1.0).pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
