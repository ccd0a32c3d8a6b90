"""Frame classifier for keyword spotting. Each frame is projected, its L2 length is appended as
a feature, and, for the training dashboard, the frames' RMS energy is computed and logged as a
plain float. Silent padding frames are all-zero and the projection has no bias: both square
roots see exact zeros. The logged energy never reaches the loss, so its sqrt's backward never
runs; the length feature's does, and divides by zero. A tracer that stopped at the first sqrt
of a zero would blame the dashboard line."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class FrameClassifier(nn.Module):
    def __init__(self, n_mels=20, d=32, keywords=4):
        super().__init__()
        self.proj = nn.Linear(n_mels, d, bias=False)
        self.mix = nn.Sequential(nn.Linear(d + 1, d), nn.GELU())
        self.head = nn.Linear(d, keywords)
        self.last_energy = 0.0

    def forward(self, frames):
        h = self.proj(frames)  # (batch, frames, d)
        energy = torch.sqrt((h**2).mean(-1))  # RMS per frame, for the dashboard only
        self.last_energy = energy.mean().item()
        length = torch.sqrt((h**2).sum(-1, keepdim=True))
        h = self.mix(torch.cat([h, length], dim=-1))
        return self.head(h.mean(dim=1))


def clips(steps, silence_from):
    g = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        x = torch.randn(16, 10, 20, generator=g)
        if step >= silence_from:
            x[:, -2:] = 0.0  # the loader pads every clip with two silent frames
        yield x, torch.randint(0, 4, (16,), generator=g)


torch.manual_seed(0)
model = FrameClassifier()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for x, y in clips(30, silence_from=12):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"energy {model.last_energy:.3f}")
