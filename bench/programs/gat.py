"""A graph attention network on a random citation-style graph: two multi-head GAT layers over an
edge list (attention logits per edge, a softmax over each node's incoming edges with
scatter_reduce, messages summed with index_add_), node classification on a training mask,
Adam with weight decay, ELU and dropout."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _timing import iterations


class GATLayer(nn.Module):
    def __init__(self, d_in, d_out, heads, concat=True):
        super().__init__()
        self.heads, self.d_out, self.concat = heads, d_out, concat
        self.lin = nn.Linear(d_in, heads * d_out, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, d_out))
        self.att_dst = nn.Parameter(torch.empty(1, heads, d_out))
        self.bias = nn.Parameter(torch.zeros(heads * d_out if concat else d_out))
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x, edge_index):
        n = x.size(0)
        src, dst = edge_index
        h = self.lin(x).view(n, self.heads, self.d_out)
        a_src = (h * self.att_src).sum(-1)
        a_dst = (h * self.att_dst).sum(-1)
        e = F.leaky_relu(a_src[src] + a_dst[dst], 0.2)
        e_max = torch.full((n, self.heads), -1e9).scatter_reduce(0, dst[:, None].expand_as(e), e, "amax")
        w = torch.exp(e - e_max[dst])
        denom = torch.zeros(n, self.heads).index_add_(0, dst, w)
        alpha = F.dropout(w / denom[dst].clamp_min(1e-16), 0.6, self.training)
        out = torch.zeros_like(h).index_add_(0, dst, h[src] * alpha[..., None])
        out = out.reshape(n, -1) if self.concat else out.mean(1)
        return out + self.bias


class GAT(nn.Module):
    def __init__(self, d_in, hidden, classes, heads=8):
        super().__init__()
        self.conv1 = GATLayer(d_in, hidden, heads)
        self.conv2 = GATLayer(hidden * heads, classes, 1, concat=False)

    def forward(self, x, edge_index):
        x = F.dropout(x, 0.6, self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, 0.6, self.training)
        return self.conv2(x, edge_index)


torch.manual_seed(1)
nodes, feats, classes = 1000, 256, 7
x = torch.randn(nodes, feats)
edges = torch.randint(0, nodes, (2, 8000))
loops = torch.arange(nodes).repeat(2, 1)
edge_index = torch.cat([edges, loops], 1)
y = torch.randint(0, classes, (nodes,))
train_mask = torch.rand(nodes) < 0.3
model = GAT(feats, 8, classes)
optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
model.train()
for _ in iterations(30):
    optimizer.zero_grad()
    out = model(x, edge_index)
    loss = F.cross_entropy(out[train_mask], y[train_mask])
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f}")
