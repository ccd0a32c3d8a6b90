"""A short script with everything inside `main()`: it ends (and frees the model and the
optimizer) before the observed steps are over, so the report is made after they died."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.encoder(x).detach())


def main():
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(2):
        loss = model(torch.randn(16, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
