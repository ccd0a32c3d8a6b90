"""A classifier trained with `optimizer.step(closure)` (the style of LBFGS and of Lightning's
automatic optimization: the step's forward and backward run inside `step()`). The softmax
temperature is annealed linearly and reaches zero at step 12: the logits divided by it are
infinite and every gradient of that step is NaN."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(128, 10), torch.randint(0, 4, (128,))

for step in range(1, 16):
    tau = 1.0 - (step - 1) / 11

    def closure(tau=tau):
        opt.zero_grad()
        logits = model(x) / tau
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        return loss

    opt.step(closure)
