"""A model whose layers the loop calls one by one (the model's own forward is never used):
features from the encoder, a linear probe on them, and a decoder that this script leaves out.
The optimizer is built from the encoder alone."""
import torch
import torch.nn as nn


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.decoder = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
        self.probe = nn.Linear(4, 2)

    def forward(self, x):
        return self.decoder(self.encoder(x))


model = AutoEncoder()
opt = torch.optim.SGD(model.encoder.parameters(), lr=0.1)
for _ in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    z = model.encoder(x)
    loss = nn.functional.cross_entropy(model.probe(z), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
