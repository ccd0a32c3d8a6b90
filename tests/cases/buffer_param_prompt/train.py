"""Prompt tuning: a frozen encoder with learnable prompt vectors prepended to the input."""
import torch
import torch.nn as nn


class PromptedEncoder(nn.Module):
    def __init__(self, encoder, n_prompts=4, d=16):
        super().__init__()
        self.encoder = encoder
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        self.register_buffer("prompts", nn.Parameter(torch.randn(n_prompts, d) * 0.1))
        self.cls = nn.Linear(d, 3)

    def forward(self, x):
        prompts = self.prompts.unsqueeze(0).expand(x.shape[0], -1, -1)
        h = self.encoder(torch.cat([prompts, x], dim=1))
        return self.cls(h.mean(1))


base = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2)
model = PromptedEncoder(base)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
for _ in range(3):
    x, y = torch.randn(5, 7, 16), torch.randint(0, 3, (5,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
