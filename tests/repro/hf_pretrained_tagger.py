"""A tagger on a pretrained encoder loaded from a local folder, fed dict batches from a DataLoader;
the `.detach()` cuts the encoder off."""
import torch
from torch import nn
from torch.utils.data import DataLoader
from transformers import AutoModel


class Tagger(nn.Module):
    def __init__(self, path, labels):
        super().__init__()
        self.encoder = AutoModel.from_pretrained(path)
        self.head = nn.Linear(self.encoder.config.hidden_size, labels)

    def forward(self, input_ids, attention_mask):
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(hidden.detach()[:, 0])


def examples(n):
    g = torch.Generator().manual_seed(0)
    return [{"input_ids": torch.randint(1, 100, (12,), generator=g), "attention_mask": torch.ones(12, dtype=torch.long),
             "labels": torch.tensor(i % 3)} for i in range(n)]


model = Tagger("ckpt", 3)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for batch in DataLoader(examples(32), batch_size=8):
    labels = batch.pop("labels")
    loss = nn.functional.cross_entropy(model(**batch), labels)
    loss.backward()
    opt.step()
    opt.zero_grad()
