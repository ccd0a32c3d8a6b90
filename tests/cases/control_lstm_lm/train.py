"""Character LSTM with truncated BPTT: the hidden state is detached between chunks."""
import torch
import torch.nn as nn


class CharLSTM(nn.Module):
    def __init__(self, vocab=40, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, d, num_layers=2, batch_first=True, dropout=0.1)
        self.out = nn.Linear(d, vocab)

    def forward(self, x, state=None):
        h, state = self.lstm(self.emb(x), state)
        return self.out(h), state


model = CharLSTM()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
text = torch.randint(0, 40, (2, 200))
state = None
for i in range(0, 120, 30):
    x, y = text[:, i:i + 30], text[:, i + 1:i + 31]
    logits, state = model(x, state)
    state = tuple(s.detach() for s in state)
    loss = nn.functional.cross_entropy(logits.reshape(-1, 40), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
