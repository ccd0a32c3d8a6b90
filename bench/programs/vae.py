"""A variational autoencoder on flattened 28x28 images: a linear encoder to a mean and a log
variance, the reparameterisation trick, a sigmoid decoder, binary cross-entropy plus the KL
term, Adam."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _timing import iterations


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


torch.manual_seed(1)
model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = [torch.rand(128, 1, 28, 28) for _ in range(8)]
model.train()
train_loss = 0.0
for i in iterations(30):
    x = data[i % len(data)]
    optimizer.zero_grad()
    recon, mu, logvar = model(x)
    loss = loss_function(recon, x, mu, logvar)
    loss.backward()
    train_loss += loss.item()
    optimizer.step()
print(f"average loss {train_loss / 30 / 128:.4f}")
