"""Old-style manual gradient reset (`p.grad.data.zero_()`, from pre-0.4 tutorials) moved
below `backward()`: every gradient is zeroed through its `.data` view before the optimizer
steps, so nothing trains. Plain SGD without momentum: a zero gradient is no update."""
import torch
import torch.nn as nn

torch.manual_seed(0)
rnn = nn.GRU(6, 12, batch_first=True)
head = nn.Linear(12, 3)
params = list(rnn.parameters()) + list(head.parameters())
opt = torch.optim.SGD(params, lr=0.1)
for step in range(5):
    x, y = torch.randn(8, 7, 6), torch.randint(0, 3, (8,))
    out, _ = rnn(x)
    loss = nn.functional.cross_entropy(head(out[:, -1]), y)
    loss.backward()
    for p in params:
        p.grad.data.zero_()
    opt.step()
