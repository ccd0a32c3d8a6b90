"""A word-level LSTM language model: embedding, two LSTM layers, a decoder tied to the
embedding, truncated backpropagation through time (the hidden state detached between
batches), gradient clipping, SGD at the classic example's high learning rate."""

import torch
import torch.nn as nn
from _timing import iterations

ntokens, emsize, nhid, bptt, batch = 2000, 128, 128, 35, 16


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(ntokens, emsize)
        self.rnn = nn.LSTM(emsize, nhid, 2, dropout=0.2)
        self.decoder = nn.Linear(nhid, ntokens)
        self.decoder.weight = self.encoder.weight  # tied weights

    def forward(self, x, hidden):
        emb = self.drop(self.encoder(x))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        return self.decoder(output).view(-1, ntokens), hidden

    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(2, bsz, nhid), w.new_zeros(2, bsz, nhid))


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


torch.manual_seed(1)
model = RNNModel()
criterion = nn.NLLLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=20.0)
corpus = torch.randint(0, ntokens, (bptt * 40 + 1, batch))
hidden = model.init_hidden(batch)
model.train()
for i in iterations(30):
    start = (i * bptt) % (corpus.size(0) - bptt - 1)
    data, targets = corpus[start : start + bptt], corpus[start + 1 : start + 1 + bptt].reshape(-1)
    hidden = repackage_hidden(hidden)
    optimizer.zero_grad()
    output, hidden = model(data, hidden)
    loss = criterion(torch.log_softmax(output, dim=-1), targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    optimizer.step()
print(f"loss {loss.item():.3f}")
