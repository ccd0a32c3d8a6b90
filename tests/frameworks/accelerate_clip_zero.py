"""An accelerate loop whose clipping bound comes from a config that says 0: Accelerate clips
through `clip_grads_with_norm_` (torch >= 2.6), not `clip_grad_norm_`, and every gradient
becomes zero."""
import torch
from accelerate import Accelerator
from torch import nn

config = {"max_grad_norm": 0.0}
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, opt = accelerator.prepare(model, opt)
for _ in range(8):
    with accelerator.accumulate(model):
        loss = model(torch.randn(8, 8)).pow(2).mean()
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), config["max_grad_norm"])
        opt.step()
        opt.zero_grad()
