"""Fine-tuning a model that was built (and its checkpoint loaded) under inference_mode,
a speed-up copied from an evaluation script: its parameters are inference tensors."""
import torch
import torch.nn as nn


def load_pretrained():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    state = {k: torch.randn_like(v) for k, v in net.state_dict().items()}  # stands in for a checkpoint
    net.load_state_dict(state)
    return net


with torch.inference_mode():
    model = load_pretrained()

opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 4, (2,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
