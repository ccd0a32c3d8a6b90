"""A quantisation-aware encoder: a straight-through rounding Function (its forward rounds with
recording off, its backward passes the gradient through). The features are detached before
the classifier, left over from a probe experiment: the encoder never learns. Only the detach
is the cut; the Function's forward is not."""
import torch
from torch import nn


class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 8) / 8

    @staticmethod
    def backward(ctx, grad):
        return grad


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 24)

    def forward(self, x):
        return RoundSTE.apply(torch.tanh(self.fc(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.classifier = nn.Linear(24, 3)

    def forward(self, x):
        features = self.encoder(x)
        return self.classifier(features.detach())


torch.manual_seed(0)
model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    x, y = torch.randn(16, 12), torch.randint(0, 3, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
