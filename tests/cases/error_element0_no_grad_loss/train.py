"""The whole training forward was put under inference_mode by a shared 'predict' helper."""
import torch
import torch.nn as nn


def predict(model, x):
    with torch.inference_mode():
        return model(x)


model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(4, 3)
    loss = (predict(model, x) - 1).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
