"""A gradient-masking hook meant for the stem only during warm-up, with an inverted
condition; the classifier is zero-initialised, so step 1 sends zeros to everything below."""
import torch
import torch.nn as nn

WARMUP = 0

model = nn.Sequential(nn.Linear(6, 24), nn.SiLU(), nn.Linear(24, 24), nn.SiLU(), nn.Linear(24, 3))
nn.init.zeros_(model[4].weight)
nn.init.zeros_(model[4].bias)
step_now = {"i": 0}


def mask_stem(grad):
    return grad if step_now["i"] < WARMUP else torch.zeros_like(grad)


model[0].weight.register_hook(mask_stem)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    step_now["i"] = step
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
