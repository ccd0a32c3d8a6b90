"""Gradient accumulation over 4 micro-batches. The guard compares the remainder with the number
of micro-batches itself (`i % accum == accum`), which is never true: the optimizer never steps,
while the loss is printed and looks alive."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
accum = 4
for i in range(12):
    x, y = torch.randn(16, 20), torch.randint(0, 3, (16,))
    loss = criterion(model(x), y) / accum
    loss.backward()
    if i % accum == accum:
        optimizer.step()
        optimizer.zero_grad()
    if i % 4 == 0:
        print(f"step {i} loss {loss.item() * accum:.3f}")
