"""A mixture-of-experts layer with hard top-k routing: the router's scores pick the experts
through `topk`'s indices, and the experts' outputs are summed without the routing weights.
Indices carry no gradient, so the router never learns (the experts do)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MoE(nn.Module):
    def __init__(self, d=8, n=4, k=2):
        super().__init__()
        self.router = nn.Linear(d, n)
        self.experts = nn.ModuleList([nn.Linear(d, d) for _ in range(n)])
        self.k = k

    def forward(self, x):
        scores = F.softmax(self.router(x), dim=-1)
        weights, idx = scores.topk(self.k, dim=-1)
        out = torch.zeros_like(x)
        for j in range(self.k):
            for e, expert in enumerate(self.experts):
                sel = idx[:, j] == e
                if sel.any():
                    out[sel] += expert(x[sel])
        return out


torch.manual_seed(0)
model = nn.Sequential(MoE(), nn.Linear(8, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(5):
    x = torch.randn(32, 8)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
