"""A caption scorer that wraps its text encoder in no_grad 'to save memory'."""
import torch
import torch.nn as nn


class Scorer(nn.Module):
    def __init__(self, vocab=40, d=16):
        super().__init__()
        self.text_encoder = nn.Sequential(nn.Embedding(vocab, d), nn.Flatten(), nn.Linear(6 * d, d))
        self.image_proj = nn.Linear(24, d)

    def forward(self, image, tokens):
        with torch.no_grad():
            t = self.text_encoder(tokens)
        return (self.image_proj(image) * t).sum(-1)


model = Scorer()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    img, tok = torch.randn(5, 24), torch.randint(0, 40, (5, 6))
    target = torch.rand(5)
    loss = nn.functional.binary_cross_entropy_with_logits(model(img, tok), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
