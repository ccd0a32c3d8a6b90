"""Linear warmup from a small learning rate with a LambdaLR scheduler and AMP bf16 autocast."""
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 2))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
for step in range(4):
    x, y = torch.randn(12, 8), torch.randint(0, 2, (12,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
