"""Low-rank adapters on a frozen encoder, with reentrant activation checkpointing (the
library way: a forward hook makes the frozen embedding's output require grad, so the
checkpointed blocks record). The loss helper detaches the logits it also logs: every adapter
and the head are cut off, and backward raises. The adapters sit inside checkpointed blocks,
where the graph that reaches them exists only during backward's recomputation."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r=4):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x))


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = LoRALinear(nn.Linear(d, d))
        self.ff = nn.Linear(d, d)

    def forward(self, x):
        return x + self.ff(torch.tanh(self.proj(x)))


class Encoder(nn.Module):
    def __init__(self, vocab=40, d=24, depth=3, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d) for _ in range(depth))
        self.classifier = nn.Linear(d, classes)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=True)
        return self.classifier(x.mean(1))


def compute_loss(model, ids, labels, log):
    logits = model(ids)
    logits = logits.detach()
    log.append(logits.argmax(-1).eq(labels).float().mean().item())
    return F.cross_entropy(logits, labels)


torch.manual_seed(0)
model = Encoder()
for name, p in model.named_parameters():
    p.requires_grad_("lora_" in name or name.startswith("classifier"))
model.embed.register_forward_hook(lambda module, inputs, output: output.requires_grad_(True))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
accuracy = []
for step in range(3):
    ids = torch.randint(0, 40, (8, 6))
    labels = torch.randint(0, 4, (8,))
    loss = compute_loss(model, ids, labels, accuracy)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
