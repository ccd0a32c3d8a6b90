"""Adding a LoRA-style adapter to a pretrained regressor, after the optimizer was made."""
import torch
import torch.nn as nn


class Adapter(nn.Module):
    def __init__(self, d, r=2):
        super().__init__()
        self.down = nn.Linear(d, r, bias=False)
        self.up = nn.Linear(r, d, bias=False)

    def forward(self, x):
        return x + self.up(self.down(x))


class Regressor(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, d), nn.ReLU())
        self.adapter = nn.Identity()
        self.out = nn.Linear(d, 1)

    def forward(self, x):
        return self.out(self.adapter(self.body(x)))


def setup(lr=1e-3):
    model = Regressor()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.adapter = Adapter(16)
    return model, opt


model, opt = setup()
for i in range(3):
    x = torch.randn(32, 8)
    loss = (model(x).squeeze(-1) - x.sum(-1)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
