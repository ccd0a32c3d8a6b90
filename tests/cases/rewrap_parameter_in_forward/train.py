"""A prompt-tuning model that wraps its computed prompt as a Parameter in forward, meaning
to make it trainable: the wrapper is a new leaf, and the prompt encoder never learns."""
import torch
import torch.nn as nn


class PromptModel(nn.Module):
    def __init__(self, d=16, n_prompt=4):
        super().__init__()
        self.seed = nn.Parameter(torch.randn(n_prompt, d))
        self.prompt_encoder = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, d))
        self.body = nn.Linear(d, d)
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        prompt = nn.Parameter(self.prompt_encoder(self.seed))
        h = torch.cat([prompt.unsqueeze(0).expand(x.shape[0], -1, -1), x], dim=1)
        return self.head(torch.relu(self.body(h)).mean(1))


model = PromptModel()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    x, y = torch.randn(8, 5, 16), torch.randint(0, 3, (8,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
