"""The keyword-spotting classifier of `logged_energy_nan.py`, trained with an optimizer that
skips a step whose gradients are not finite (as the fused optimizers of apex and DeepSpeed do
under loss scaling): from step 12 every clip is padded with silent frames, the length
feature's sqrt divides by zero in its backward, and every step from there is skipped (the
weights stay finite, the NaN recurs)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class FrameClassifier(nn.Module):
    def __init__(self, n_mels=20, d=32, keywords=4):
        super().__init__()
        self.proj = nn.Linear(n_mels, d, bias=False)
        self.mix = nn.Sequential(nn.Linear(d + 1, d), nn.GELU())
        self.head = nn.Linear(d, keywords)

    def forward(self, frames):
        h = self.proj(frames)
        length = torch.sqrt((h**2).sum(-1, keepdim=True))
        h = self.mix(torch.cat([h, length], dim=-1))
        return self.head(h.mean(dim=1))


def clips(steps, silence_from):
    g = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        x = torch.randn(16, 10, 20, generator=g)
        if step >= silence_from:
            x[:, -2:] = 0.0
        yield x, torch.randint(0, 4, (16,), generator=g)


torch.manual_seed(0)
model = FrameClassifier()


class SkippingAdamW(torch.optim.AdamW):
    def step(self, closure=None):
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not all(torch.isfinite(g).all() for g in grads):
            self.skipped += 1
            return None
        return super().step(closure)


opt = SkippingAdamW(model.parameters(), lr=3e-3)
opt.skipped = 0
for x, y in clips(20, silence_from=12):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"skipped {opt.skipped} steps")
