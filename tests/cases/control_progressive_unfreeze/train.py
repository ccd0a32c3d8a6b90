"""Progressive unfreezing (ULMFiT-style fine-tuning): the loaded backbone is frozen for the
first steps, then unfrozen and handed to the optimizer as its own group: a deliberate schedule
the script chose, not a freeze it contradicts."""
import tempfile

import torch
import torch.nn as nn

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
path = tempfile.mktemp()
torch.save(backbone.state_dict(), path)
backbone.load_state_dict(torch.load(path))
model = nn.Sequential(backbone, nn.Linear(16, 3))
for p in backbone.parameters():
    p.requires_grad = False
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for step in range(6):
    if step == 2:
        for p in backbone.parameters():
            p.requires_grad = True
        opt.add_param_group({"params": list(backbone.parameters()), "lr": 1e-4})
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
