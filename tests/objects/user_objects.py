"""Every operation a user does on their own objects, mid-training: `torch.save`/`torch.load`,
`copy.deepcopy`, `pickle`, `state_dict`/`load_state_dict`, `torch.jit.script`/`trace`,
`torch.export`, `torch.compile`, a spawned process given the model, `repr`, and whether a
deleted model is freed. Prints one line per (model, operation, step); the test compares the
lines with the same script run plainly.

GS_MODE selects the in-process API (`trace`, `watch`, `watch_all`, `diagnose`); empty: plain,
or whatever `gradsleuth run` set up.
"""

import contextlib
import copy
import gc
import hashlib
import io
import os
import pickle
import sys
import weakref

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Tied(nn.Module):
    """Buffers (BatchNorm) and a weight shared by two layers."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.lin = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.out = nn.Linear(8, 20, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, x):
        return self.out(self.bn(torch.relu(self.lin(self.emb(x)))))


def mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))


def bert():
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertForSequenceClassification(cfg)


class Head(nn.Module):
    """The library model's loss computed in the model, as a user's wrapper would."""

    def __init__(self):
        super().__init__()
        self.inner = bert()

    def forward(self, ids, labels):
        return self.inner(input_ids=ids, labels=labels).logits


def digest(model) -> str:
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:12]


def child(model, x, q):
    q.put(tuple(model(*x).shape))


def exercise(kind, make, x, y, lines):
    """Trains one model four steps, doing every operation at the first and the last; returns
    a weak reference to the model."""
    mode = os.environ.get("GS_MODE", "")
    torch.manual_seed(1)
    model = make()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def loss_of(m):
        out = m(*x)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    ctx = contextlib.nullcontext()
    if mode:
        import gradsleuth

        if mode == "trace":
            ctx = gradsleuth.trace(steps=2)
        elif mode == "watch":
            ctx = gradsleuth.watch(model, opt, status=False)
        elif mode == "watch_all":
            ctx = gradsleuth.watch(status=False)
        elif mode == "diagnose":
            gradsleuth.diagnose(model, (x, y), lambda out, t: F.cross_entropy(out, t), opt)

    def attempt(name, fn, step):
        try:
            value = fn()
        except Exception as e:  # the plain run may fail too: the outcome is compared
            value = f"error {type(e).__name__}"
        lines.append(f"{kind} {name}@{step} {value}")

    def saved():
        b = io.BytesIO()
        torch.save(model, b)
        b.seek(0)
        return digest(torch.load(b, weights_only=False))

    def saved_optimizer():
        b = io.BytesIO()
        torch.save(opt, b)
        b.seek(0)
        o = torch.load(b, weights_only=False)
        return f"{type(o).__name__} {len(o.state)}"

    def deep_copy():
        m = copy.deepcopy(model)
        o = torch.optim.Adam(m.parameters(), lr=1e-2)
        o.load_state_dict(copy.deepcopy(opt.state_dict()))
        for _ in range(2):
            o.zero_grad()
            loss_of(m).backward()
            o.step()
        return digest(m)

    def pickled():
        return digest(pickle.loads(pickle.dumps(model)))

    def state_dict():
        m = make()
        m.load_state_dict(model.state_dict())
        o = torch.optim.Adam(m.parameters(), lr=1e-2)
        o.load_state_dict(opt.state_dict())
        return f"{digest(m)} {len(o.state)}"

    def scripted():
        return tuple(torch.jit.script(model)(*x).shape)

    def traced():
        model.eval()
        try:
            return tuple(torch.jit.trace(model, x)(*x).shape)
        finally:
            model.train()

    def exported():
        model.eval()
        try:
            return tuple(torch.export.export(model, x).module()(*x).shape)
        finally:
            model.train()

    def compiled():
        m = torch.compile(model, backend="eager")
        return f"{float(loss_of(m)):.6f}"

    def spawned():
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(model, x, q))
        p.start()
        shape = q.get(timeout=120)
        p.join()
        return f"{shape} {p.exitcode}"

    def described():
        return hashlib.sha256(repr(model).encode()).hexdigest()[:8]

    ops = [
        ("save", saved),
        ("save_optimizer", saved_optimizer),
        ("deepcopy", deep_copy),
        ("pickle", pickled),
        ("state_dict", state_dict),
        ("jit_script", scripted),
        ("jit_trace", traced),
        ("export", exported),
        ("compile", compiled),
        ("repr", described),
    ]
    if kind == "mlp":
        ops.append(("spawn", spawned))
    with ctx:
        for step in range(4):
            opt.zero_grad()
            loss_of(model).backward()
            opt.step()
            if step in (0, 3):  # inside the observed window and after it
                for name, fn in ops:
                    attempt(name, fn, step)
    lines.append(f"{kind} final {digest(model)}")
    return weakref.ref(model)


def main():
    only = set(sys.argv[1:])
    kinds = {
        "mlp": (mlp, (torch.randn(8, 6),), torch.randint(0, 4, (8,))),
        "tied": (Tied, (torch.randint(0, 20, (16,)),), torch.randint(0, 20, (16,))),
        "bert": (Head, (torch.randint(0, 50, (4, 8)), torch.randint(0, 3, (4,))), torch.randint(0, 3, (4,))),
    }
    lines: list[str] = []
    for kind, (make, x, y) in kinds.items():
        if only and kind not in only:
            continue
        ref = exercise(kind, make, x, y, lines)
        gc.collect()
        lines.append(f"{kind} freed {ref() is None}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
