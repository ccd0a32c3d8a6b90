"""A text classifier whose encoder is compiled with TorchScript for speed. The encoder's forward
detaches its output (left over from a feature-extraction export), so the encoder never trains;
the op-level trace cannot see inside TorchScript, and the encoder's layers must not be called
unused."""
import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, d)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.proj(self.emb(tokens).mean(1)))
        return h.detach()


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.jit.script(Encoder())
        self.head = nn.Linear(32, 4)

    def forward(self, tokens):
        return self.head(self.encoder(tokens))


model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    tokens, labels = torch.randint(0, 50, (16, 12)), torch.randint(0, 4, (16,))
    loss = nn.functional.cross_entropy(model(tokens), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
