"""A projection head built under `torch.inference_mode()` (a speed-up copied from an
embedding-export helper), then initialised by the script: `nn.init` writes an inference tensor in
place outside the block and torch refuses ("Inplace update to inference tensor outside
InferenceMode") before the model ever runs."""
import torch
import torch.nn as nn


def projection(dim, out):
    with torch.inference_mode():
        head = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, out))
    for m in head:
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
    return head


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), projection(16, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
