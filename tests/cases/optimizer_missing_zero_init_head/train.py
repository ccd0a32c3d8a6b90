"""A token tagger whose output layer starts at zero (a common choice for a stable start);
the per-part learning rates list the embedding and the mixer and forget the output layer."""
import torch
import torch.nn as nn


class Tagger(nn.Module):
    def __init__(self, vocab=50, dim=16, tags=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mixer = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, tags)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, tokens):
        h, _ = self.mixer(self.embed(tokens))
        return self.out(h)


model = Tagger()
optimizer = torch.optim.Adam(
    [
        {"params": model.embed.parameters(), "lr": 1e-3},
        {"params": model.mixer.parameters(), "lr": 3e-3},
    ]
)
for step in range(3):
    tokens = torch.randint(0, 50, (4, 7))
    tags = torch.randint(0, 5, (4, 7))
    logits = model(tokens)
    loss = nn.functional.cross_entropy(logits.reshape(-1, 5), tags.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
