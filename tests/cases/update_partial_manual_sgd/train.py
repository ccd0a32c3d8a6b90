"""An encoder-decoder trained by hand: the update loop goes over the encoder's parameters
only (the decoder was added later), so the decoder gets gradients and never changes."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 8), nn.Tanh())
        self.decoder = nn.Linear(8, 20)

    def forward(self, x):
        return self.decoder(self.encoder(x))


torch.manual_seed(0)
model = AutoEncoder()
lr = 0.1
for step in range(6):
    x = torch.randn(32, 20)
    loss = F.mse_loss(model(x), x)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(p.grad, alpha=-lr)
