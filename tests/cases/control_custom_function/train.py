"""A custom autograd.Function (straight-through sign) plus autocast and a metric with .item()."""
import torch
import torch.nn as nn


class STESign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.clamp(-1, 1)


class BinaryNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 2)

    def forward(self, x):
        return self.fc2(STESign.apply(self.fc1(x)))


model = BinaryNet()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
history = []
for _ in range(3):
    x, y = torch.randn(8, 10), torch.randint(0, 2, (8,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
    loss = nn.functional.cross_entropy(logits.float(), y)
    history.append(loss.item())
    acc = (logits.argmax(-1) == y).float().mean().item()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(history, acc)
