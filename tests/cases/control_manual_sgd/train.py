"""Linear regression trained with a hand-written SGD update (no optimizer object)."""
import torch
import torch.nn as nn

model = nn.Linear(3, 1)
lr = 0.1
true_w = torch.tensor([[1.0, -2.0, 0.5]])
for step in range(5):
    x = torch.randn(32, 3)
    y = x @ true_w.t() + 0.3
    loss = ((model(x) - y) ** 2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
