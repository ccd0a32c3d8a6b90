"""Control: a tagger on BertModel's hidden states (the CLS token), the pattern of sentence
encoders and token classifiers. BertModel still runs its pooler, whose output nothing uses: by
design, an info line at most."""
import torch
from torch import nn
from transformers import BertConfig, BertModel

torch.manual_seed(0)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = BertModel(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                            intermediate_size=32, max_position_embeddings=32))
        self.head = nn.Linear(16, 3)

    def forward(self, input_ids):
        return self.head(self.encoder(input_ids=input_ids).last_hidden_state[:, 0])


model = Tagger()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    loss = nn.functional.cross_entropy(model(torch.randint(1, 100, (4, 12))), torch.randint(0, 3, (4,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
