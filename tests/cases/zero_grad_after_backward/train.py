"""A Trainer class whose step clears gradients in the wrong place."""
import torch
import torch.nn as nn


class Trainer:
    def __init__(self, model, lr=1e-2):
        self.model = model
        self.opt = torch.optim.RMSprop(model.parameters(), lr=lr)
        self.loss_fn = nn.MSELoss()

    def train_step(self, x, y):
        pred = self.model(x)
        loss = self.loss_fn(pred, y)
        loss.backward()
        self.opt.zero_grad()
        self.opt.step()
        return loss.item()


model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))
trainer = Trainer(model)
for i in range(4):
    x = torch.randn(20, 5)
    trainer.train_step(x, x.sum(1, keepdim=True))
