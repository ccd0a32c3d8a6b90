"""gradsleuth benchmarks, each side by side with its anchor in one run; ratios printed.

    make bench            # everything
    python bench/run.py walk|step|op|watch|programs|graph|where|explain|merge|lint|install|repro|repro-all|repro-mutants
    python bench/run.py programs --against DIR   # also another build of the package (before/after)
    python bench/run.py programs --rounds 3      # runs per program (default 5)

walk: an autograd graph of about 1,000,000 nodes: the Rust walk (`gradsleuth._core.walk`) vs a
      pure-Python BFS over `next_functions`, vs reading every node's `next_functions` once.
step: per-step cost of the three bench models (plain step = 1.00x) while gradsleuth observes,
      after its hooks are removed, and under `torch.autograd.detect_anomaly()`.
op:   the op-level step (every torch call recorded, as in the first observed step) beside a
      no-op Python TorchDispatchMode and `detect_anomaly()`.
watch: the steady-state step under `gradsleuth.watch(model, optimizer)` beside the plain step, and
       a NaN step localized by watch beside the same step under `detect_anomaly()`.
explain: a 100 MB log and a 2 KB traceback, through the installed command and the Rust binary.
where: `gradsleuth where torch.relu` with a cold and a warm index cache.
merge: 1,000 synthetic rank captures of a 1,000-parameter model merged by `gradsleuth report DIR`
       (streamed, in parallel chunks) beside Python's json.load of the same files: s, peak RSS.
programs: seven realistic training programs (bench/programs: a CNN classifier, a VAE, a GAN with two
      optimizers, an LSTM language model, a small GPT, a graph attention network, transformers'
      BERT from a config), their training code unmodified, each observed inside its own
      process: the op-level iteration, the cheap-tier iterations, those after the hooks are
      removed, and watch's steady state, as ratios to the same process's plain iterations.
repro: `gradsleuth repro` on a sample of the case corpus's buggy cases (`repro-all`: every one):
      lines kept beside the original's, runs, seconds; the goal is 80% at <= 30 lines in 2 min.
repro-mutants: the same on a sample of the mutation corpus's flagged third-party mutants (after
      `make eval`): scripts that load a model file copied from transformers, torchvision or timm,
      the bug inside it; also whether the kit's repro.py runs alone from an empty folder.
lint: `gradsleuth lint` (all rules) beside TorchFix and `ruff check --select E9,F` on a 100k-line
      subset of torch's Python sources and on all of them: CPU s, wall s, lines/s, peak RSS.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from gradsleuth._core import Recorder, graph_nodes, walk
from gradsleuth._tracer import Tracer

torch.set_num_threads(1)


def python_bfs(root):
    seen = {id(root)}
    frontier = [root]
    nodes = 0
    leaves = []
    while frontier:
        nxt = []
        for n in frontier:
            nodes += 1
            var = getattr(n, "variable", None)
            if var is not None:
                leaves.append(id(var))
            for child, _ in n.next_functions:
                if child is not None and id(child) not in seen:
                    seen.add(id(child))
                    nxt.append(child)
        frontier = nxt
    return nodes, leaves


def bench_walk(n_nodes=1_000_000, repeats=3):
    # 1,000 parameters, each through a chain of ~1,000 ops, joined at the loss: about
    # n_nodes nodes, about 1,000 deep. (A single million-deep chain is not a real graph, and
    # PyTorch overflows the C stack freeing one once Python has wrapped its nodes.)
    params = [torch.randn(4, requires_grad=True) for _ in range(1000)]
    per_chain = n_nodes // (2 * len(params))
    ends = []
    for p in params:
        h = p
        for _ in range(per_chain):
            h = h * 0.999 + 0.001
        ends.append(h)
    h = torch.stack(ends).sum()
    root = h.grad_fn
    nodes, _ = python_bfs(root)
    # The node list for the bare read, collected outside the timing.
    all_nodes = []
    seen = {id(root)}
    frontier = [root]
    while frontier:
        nxt = []
        for n in frontier:
            all_nodes.append(n)
            for c, _ in n.next_functions:
                if c is not None and id(c) not in seen:
                    seen.add(id(c))
                    nxt.append(c)
        frontier = nxt

    def bare():
        for n in all_nodes:
            n.next_functions  # noqa: B018 - the cost being measured

    timings = {"rust walk": [], "python BFS": [], "bare next_functions read": []}
    for _ in range(repeats):
        for name, fn in (
            ("rust walk", lambda: walk(root)),
            ("python BFS", lambda: python_bfs(root)),
            ("bare next_functions read", bare),
        ):
            gc.collect()
            t0 = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - t0)
    w = walk(root)
    assert w["nodes"] == nodes and len(w["leaves"]) == 1000, (w["nodes"], nodes)
    print(f"\n## graph walk: {nodes:,} nodes, {len(w['leaves'])} leaves (best of {repeats})")
    best = {k: min(v) for k, v in timings.items()}
    bare_t = best["bare next_functions read"]
    print(f"{'':28}{'seconds':>10}{'µs/node':>10}{'vs bare read':>14}{'vs python':>11}")
    for k, t in best.items():
        print(f"{k:28}{t:10.3f}{t / nodes * 1e6:10.3f}{t / bare_t:13.2f}x{t / best['python BFS']:10.2f}x")


# ---- per-step overhead --------------------------------------------------------------------


def mlp():
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(50)])
    return model, lambda: (torch.randn(32, 256), torch.randn(32, 256)), F.mse_loss


def cnn():
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    return model, lambda: (torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))), F.cross_entropy


def transformer():
    layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
    model = nn.Sequential(
        nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Flatten(), nn.Linear(128 * 64, 4)
    )
    return model, lambda: (torch.randn(8, 64, 128), torch.randint(0, 4, (8,))), F.cross_entropy


def step_fn(model, data, loss_fn):
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = data()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    step.model, step.opt = model, opt
    return step


def median_ms(step, n, ctx=None):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        if ctx is None:
            step()
        else:
            with ctx():
                step()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def block_ms(step, n, block=20):
    """Median over `n` blocks of `block` consecutive steps of the mean step: a cost paid every
    `block`th step (watch's update ratios) counts, where a median of single steps would hide it."""
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        for _ in range(block):
            step()
        ts.append((time.perf_counter() - t0) / block)
    return statistics.median(ts) * 1e3


MODELS = (("MLP 50x256", mlp), ("CNN 4-layer", cnn), ("transformer", transformer))


def _observing(deep_all):
    """A step measured while a tracer observes (started once, first step not measured)."""

    def measure(step, n):
        tracer = Tracer(Recorder("run", 10**6), 10**6, deep_all=deep_all).start()
        step()  # first sight of the model: scan and hook registration, not a steady step
        ms = median_ms(step, n)
        tracer.finish()
        return ms

    return measure


def _watching(step, n):
    """A steady step under `gradsleuth.watch(model, optimizer)` (norms every step, update
    ratios every 20th, forward hooks kept ready to re-run a NaN step), as the mean over blocks
    of 20 steps. One watch per model for all rounds, its hooks removed while the plain step is
    timed: the steady state is after its first 40 steps (first sight of the model, and the
    op-level step an anomaly arms, once: the MLP's gradients do vanish), timed apart."""
    from gradsleuth._watch import watch

    w = getattr(step, "watch", None)
    if w is None:
        w = step.watch = watch(step.model, step.opt, status=False)
        ts = []
        for _ in range(40):
            t0 = time.perf_counter()
            step()
            ts.append((time.perf_counter() - t0) * 1e3)
        step.startup = (ts[0], max(ts[1:]), w._deep_runs)
    else:
        w.closed = False
        w.start()
        step()
    ms = block_ms(step, n)
    w.close()
    return ms


def _noop_dispatch(step, n):
    from torch.utils._python_dispatch import TorchDispatchMode

    class NoopDispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return median_ms(step, n, ctx=NoopDispatch)


def _anomaly(step, n):
    return median_ms(step, n, ctx=lambda: torch.autograd.detect_anomaly(check_nan=True))


def compare(title, modes, rounds=5, per_round=8, plain=median_ms):
    """Each mode beside the plain step (timed by `plain`), interleaved in rounds; medians and
    ratios."""
    print(f"\n## {title} (median ms; ratio to the plain step), torch", torch.__version__, "CPU, 1 thread")
    print(f"{'model':14}{'plain':>10}" + "".join(f"{label:>20}" for label, _ in modes))
    steps = []
    for name, make in MODELS:
        torch.manual_seed(0)
        model, data, loss_fn = make()
        step = step_fn(model, data, loss_fn)
        for _ in range(3):
            step()
        res = {"plain": []} | {label: [] for label, _ in modes}
        for _ in range(rounds):
            res["plain"].append(plain(step, per_round))
            for label, measure in modes:
                res[label].append(measure(step, per_round))
        p = statistics.median(res["plain"])
        cells = "".join(
            f"{statistics.median(res[label]):12.2f} ({statistics.median(res[label]) / p:4.2f}x)" for label, _ in modes
        )
        print(f"{name:14}{p:10.2f}{cells}")
        steps.append((name, step))
    return steps


def bench_step():
    """The cheap tier while observing, after its hooks are removed, and detect_anomaly."""
    compare(
        "per-step cost",
        [
            ("observing", _observing(False)),
            ("after hooks off", lambda step, n: median_ms(step, n)),
            ("detect_anomaly", _anomaly),
        ],
    )


def bench_op():
    """The op-level step (every torch call recorded) beside a no-op Python TorchDispatchMode
    and detect_anomaly."""
    compare(
        "op-level step",
        [("op-level", _observing(True)), ("no-op dispatch", _noop_dispatch), ("detect_anomaly", _anomaly)],
    )


def bench_watch():
    """Steady-state cost of watch on the three models, and a NaN step localized by watch's
    re-run beside the same step under detect_anomaly()."""
    steps = compare(
        "watch: steady-state per-step cost (mean of 20 consecutive steps)",
        [("watch", _watching)],
        rounds=30,
        per_round=1,
        plain=block_ms,
    )
    for name, step in steps:
        first, slowest, armed = step.startup
        print(
            f"{name}: start-up, the first watched step {first:.1f} ms, the slowest of the next 39 {slowest:.1f} ms"
            f" ({armed} op-level step(s) armed)"
        )
    _bench_nan()


def _nan_model():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(64, 128, bias=False)
            self.body = nn.Sequential(*[nn.Sequential(nn.Linear(129, 129), nn.GELU()) for _ in range(8)])
            self.head = nn.Linear(129, 10)

        def forward(self, x):
            h = self.proj(x)
            length = torch.sqrt((h**2).sum(-1, keepdim=True))  # NaN in backward at a zero row
            return self.head(self.body(torch.cat([h, length], -1)).mean(1))

    return Net()


class _PrototypeNet(nn.Module):
    """A one-shot classifier: an encoder, then each query's distance to each class's prototype,
    written by hand at the very end. A query that duplicates a support sample sits at distance
    exactly 0 from it, where sqrt's backward is 0/0. The culprit is the model's last op, so
    watch re-runs the whole forward to reach it."""

    def __init__(self, d=128, depth=8):
        super().__init__()
        self.body = nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(depth)])

    def forward(self, support, query):
        s, q = self.body(support), self.body(query)
        return -torch.sqrt(((q[:, None] - s[None]) ** 2).sum(-1))  # distances as logits


class _Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        att = att.masked_fill(~keep[:, None, None, :], float("-inf"))  # padding keys
        y = att.softmax(-1) @ v  # a sequence that is all padding: softmax of -inf only = NaN
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class _Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = _Attention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, keep):
        x = x + self.attn(self.ln1(x), keep)
        return x + self.mlp(self.ln2(x))


class _TinyLM(nn.Module):
    def __init__(self, vocab=100, d=64, heads=4, layers=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([_Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, keep):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, keep)
        return self.head(self.ln(x))


def _nan_cases():
    """(name, model maker, the batch that makes the NaN, a finite batch, loss): a NaN made in
    backward early in the model, one made in forward, one made in backward by the last op."""
    torch.manual_seed(0)
    x = torch.randn(16, 32, 64)
    x[:, -1] = 0.0
    y = torch.randint(0, 10, (16,))
    tokens = torch.randint(0, 100, (8, 32))
    keep = torch.ones(8, 32, dtype=torch.bool)
    keep[3] = False  # one sequence of the batch is all padding
    support, query = torch.randn(10, 128), torch.randn(64, 128)
    labels = torch.randint(0, 10, (64,))
    dup = query.clone()
    dup[5] = support[labels[5]]  # a query that is also the support sample of its class
    return (
        ("sqrt of a zero length (backward NaN)", _nan_model, (x,), (x + 1.0,), lambda out: F.cross_entropy(out, y)),
        (
            "fully masked attention row (forward NaN)",
            _TinyLM,
            (tokens, keep),
            (tokens, torch.ones_like(keep)),
            lambda out: F.cross_entropy(out.flatten(0, 1), tokens.flatten()),
        ),
        (
            "distance 0 at the model's last op (backward NaN, the whole forward re-run)",
            _PrototypeNet,
            (support, dup),
            (support, query),
            lambda out: F.cross_entropy(out, labels),
        ),
    )


def _bench_nan(repeats=7):
    """One step whose gradients turn NaN: plain, with watch (which re-runs it with checks to
    find the op and line), and under detect_anomaly (which raises at the first NaN node)."""
    for case in _nan_cases():
        _bench_nan_case(*case, repeats)


def _trained(make, clean, loss_fn, steps=3):
    """A model and optimizer that have trained a few finite steps (Adam's state made)."""
    model = make()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        loss = loss_fn(model(*clean))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


def _where_anomaly_stops(make, batch, clean, loss_fn, node_name):
    """How far into the plain backward detect_anomaly got before raising: the fraction of the
    backward's time elapsed when the first `node_name` node returning a NaN finished (node
    hooks on every node, so only the fraction is read from this run, not its times)."""
    model, opt = _trained(make, clean, loss_fn)
    loss = loss_fn(model(*batch))
    opt.zero_grad()
    stamps = []

    def hook(grad_inputs, _grad_outputs):
        if any(g is not None and bool(torch.isnan(g).any()) for g in grad_inputs):
            stamps.append(time.perf_counter())

    for node in graph_nodes(loss.grad_fn):
        if type(node).__name__ == node_name:
            node.register_hook(hook)
    t0 = time.perf_counter()
    loss.backward()
    t1 = time.perf_counter()
    return (min(stamps) - t0) / (t1 - t0) if stamps else 1.0


def _bench_nan_case(name, make, batch, clean, loss_fn, repeats):
    from gradsleuth._watch import watch

    marks = {"forward": [], "backward": []}

    def run(mode):
        # A run that has trained a few finite steps (watch set up and warm), then the batch
        # that turns the gradients NaN: the time of that one step.
        model, opt = _trained(make, clean, loss_fn)
        w = watch(model, opt, status=False) if mode == "watch" else None
        if w is not None:  # the steps before the NaN, watched
            loss = loss_fn(model(*clean))
            opt.zero_grad()
            loss.backward()
            opt.step()
        t0 = time.perf_counter()
        try:
            if mode == "anomaly":
                with torch.autograd.detect_anomaly(check_nan=True):
                    loss = loss_fn(model(*batch))
                    opt.zero_grad()
                    loss.backward()
            else:
                out = model(*batch)
                if mode == "plain":
                    marks["forward"].append((time.perf_counter() - t0) * 1e3)
                loss = loss_fn(out)
                opt.zero_grad()
                loss.backward()
                if mode == "plain":
                    marks["backward"].append((time.perf_counter() - t0) * 1e3)
            opt.step()
        except RuntimeError as e:
            where = str(e).split("\n")[0][:70]
        else:
            where = ""
        elapsed = (time.perf_counter() - t0) * 1e3
        if w is not None:
            t = w.localized or {}
            rerun.append(getattr(w, "localize_seconds", 0.0) * 1e3)
            if t.get("backward_node"):
                where = f"{t['backward_node']} (backward of {t.get('backward_op')}) at line {t['backward_at']['line']}"
            elif t.get("forward_op"):
                where = f"forward {t['forward_op']} at line {t['forward_at']['line']}"
            w.close()
        return elapsed, where

    res = {m: [] for m in ("plain", "watch", "anomaly")}
    rerun = []
    where = {}
    for _ in range(repeats):
        for m in res:
            ms, w = run(m)
            res[m].append(ms)
            where[m] = w
    plain = statistics.median(res["plain"])
    fwd, fb = statistics.median(marks["forward"]), statistics.median(marks["backward"])
    # detect_anomaly raises inside backward, at the first node returning a NaN: its added cost
    # is counted over the plain step up to that same point (the forward plus the part of the
    # backward it ran); watch's over the whole plain step.
    raised = where["anomaly"].split("'")[1] if where["anomaly"].count("'") >= 2 else ""
    frac = _where_anomaly_stops(make, batch, clean, loss_fn, raised) if raised else 1.0
    base = {"plain": plain, "watch": plain, "anomaly": fwd + frac * (fb - fwd)}
    print(f"\n## NaN step, {name}: median ms of {repeats} runs")
    print(
        f"plain step {plain:.1f} ms: forward {fwd:.1f}, backward {fb - fwd:.1f}, optimizer {plain - fb:.1f};"
        f" detect_anomaly stopped {frac:.0%} into the backward: plain to there {base['anomaly']:.1f} ms"
    )
    for m in res:
        t = statistics.median(res[m])
        print(f"{m:10}{t:9.1f} ms {t / plain:6.2f}x plain  added {t - base[m]:7.1f} ms   {where[m]}")
    wt, at = statistics.median(res["watch"]), statistics.median(res["anomaly"])
    rr = statistics.median(rerun)
    print(
        f"the step that localizes it: watch's re-run {rr:.1f} ms vs the same step under detect_anomaly {at:.1f} ms:"
        f" {at / max(rr, 1e-9):.1f}x cheaper (goal >= 3x)"
    )
    w_added, a_added = wt - plain, at - base["anomaly"]
    print(
        f"the whole NaN step (watch's monitoring + its re-run) adds {w_added:.1f} ms, detect_anomaly"
        f" {a_added:.1f} ms: {a_added / max(w_added, 1e-9):.1f}x less added cost (goal >= 3x)"
    )
    # Nobody knows which step will go NaN: detect_anomaly has to be on from the start, watch is.
    steady = _steady_costs(make, clean, loss_fn)
    for n in (100, 1000):
        anomaly_run = n * (steady["anomaly"] - steady["plain"])
        # (a per-step cost lost in the timing noise counts as zero, the NaN step as measured)
        watch_run = n * max(steady["watch"] - steady["plain"], 0.0) + max(w_added, 0.0)
        print(
            f"to trace a NaN at step {n}: detect_anomaly adds {anomaly_run:.0f} ms, watch "
            f"{watch_run:.0f} ms ({anomaly_run / max(watch_run, 1e-9):.0f}x less)"
        )


def _steady_costs(make, clean, loss_fn, n=20):
    """Per-step ms of finite steps of the same model: plain, watched, under detect_anomaly."""
    from gradsleuth._watch import watch

    model, opt = _trained(make, clean, loss_fn)

    def step():
        loss = loss_fn(model(*clean))
        opt.zero_grad()
        loss.backward()
        opt.step()

    out = {"plain": median_ms(step, n)}
    w = watch(model, opt, status=False)
    step()
    out["watch"] = median_ms(step, n)
    w.close()
    out["anomaly"] = median_ms(step, n, ctx=lambda: torch.autograd.detect_anomaly(check_nan=True))
    return out


def bench_graph(blocks=1000, experts=11, dot_timeout=120):
    """A ~100,000-node autograd graph: gradsleuth's HTML report (graph snapshot in Rust, layout
    and SVG in Rust) beside torchviz.make_dot + `dot -Tsvg` on the same graph; then the page
    opened in headless Chromium. The model is wide (1,000 blocks of 11 parallel experts, all
    active), a few thousand levels deep: within what gradsleuth reads of a graph (`MAX_DEPTH`),
    where a chain of 8,000 residual blocks would be cut at that depth."""
    import os
    import shutil
    import subprocess
    import tempfile

    from gradsleuth._core import Recorder

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.experts = nn.ModuleList(
                nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d)) for _ in range(experts)
            )

        def forward(self, x):
            h = self.norm(x)
            return x + torch.stack([e(h) for e in self.experts]).mean(0)

    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(8, 8)
            self.blocks = nn.ModuleList([Block(8) for _ in range(blocks)])
            self.head = nn.Linear(8, 1)

        def forward(self, x):
            h = self.embed(x)
            for b in self.blocks:
                h = b(h)
            return self.head(h)

    torch.manual_seed(0)
    model = Deep()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    rec = Recorder("diagnose", 1)
    tracer = Tracer(rec, 1).start()
    loss = model(torch.randn(2, 8)).pow(2).mean()
    opt.zero_grad()
    t_render = None
    # torchviz walks the same live graph first (backward frees its saved tensors).
    # make_dot recurses once per node: give it the stack a 100k-deep recursion needs.
    import threading

    from torchviz import make_dot

    box = {}

    def draw():
        sys.setrecursionlimit(1_000_000)
        t0 = time.perf_counter()
        try:
            box["src"] = make_dot(loss, params=dict(model.named_parameters())).source
        except RecursionError as e:
            box["error"] = repr(e)
        box["t"] = time.perf_counter() - t0

    threading.stack_size(1 << 30)
    worker = threading.Thread(target=draw)
    worker.start()
    worker.join()
    threading.stack_size(0)
    src, t_make_dot = box.get("src", "digraph {}"), box["t"]
    loss.backward()
    opt.step()
    tracer.finish()
    snapshot = json.loads(rec.to_json()).get("graph", {})
    nodes = len(snapshot.get("nodes", []))
    assert not snapshot.get("truncated"), "the bench graph is deeper than gradsleuth reads"
    t0 = time.perf_counter()
    report = rec.report()
    page = report.render("html")
    t_render = time.perf_counter() - t0
    ours = getattr(tracer, "graph_seconds", 0.0) + t_render
    with tempfile.TemporaryDirectory() as d:
        dot_file = os.path.join(d, "g.dot")
        with open(dot_file, "w") as f:
            f.write(src)
        t0 = time.perf_counter()
        try:
            subprocess.run(["dot", "-Tsvg", "-o", os.path.join(d, "g.svg"), dot_file], timeout=dot_timeout, check=True)
            t_dot = time.perf_counter() - t0
        except subprocess.TimeoutExpired:
            t_dot = None
        html = os.path.join(d, "report.html")
        with open(html, "w") as f:
            f.write(
                page.replace(
                    "</body>",
                    "<script>addEventListener('load',()=>{document.body.dataset.loaded=performance.now()})</script></body>",
                )
            )
        chromium = shutil.which("chromium")
        opened = None
        if chromium:
            proc = subprocess.run(
                [
                    chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    f"--user-data-dir={d}/profile",
                    "--dump-dom",
                    "file://" + html,
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            import re

            m = re.search(r'data-loaded="([\d.]+)"', proc.stdout)
            opened = float(m.group(1)) / 1e3 if m else None
    print(f"\n## autograd graph of {nodes:,} nodes: HTML report vs torchviz + dot (seconds)")
    print(f"{'gradsleuth (snapshot + analysis + layout + HTML)':52}{ours:9.2f}   page {len(page) / 1e3:.0f} kB")
    dot_text = f"{t_dot:9.2f}" if t_dot is not None else f"  timed out after {dot_timeout} s"
    total = t_make_dot + (t_dot if t_dot is not None else dot_timeout)
    print(f"{'torchviz.make_dot':52}{t_make_dot:9.2f}")
    print(f"{'dot -Tsvg':52}{dot_text}")
    print(f"torchviz + dot / gradsleuth: {'>' if t_dot is None else ''}{total / ours:.0f}x (goal >= 20x)")
    if opened is not None:
        print(f"page load in headless Chromium: {opened:.2f} s (goal < 2 s)")


# ---- real programs ------------------------------------------------------------------------

PROGRAMS = ("cnn_mnist", "vae", "dcgan", "lstm_lm", "gpt", "gat", "hf_bert", "hf_trainer_bert", "lightning_transformer")
PROGRAM_GOALS = {"op-level": 1.3, "cheap tier": 1.03, "after removal": 1.0, "watch steady": 1.03}


def _program_times(script, package=None):
    """One run of `script` observed in its own process (`GS_BENCH_OBSERVE`, see
    bench/programs/_timing.py): its iteration times and phases. `package`: a directory holding
    another build of the `gradsleuth` package to use instead."""
    import os
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        env = dict(os.environ, GS_BENCH_TIMES=f.name, GS_BENCH_OBSERVE="1")
        if package:
            env["PYTHONPATH"] = package
        r = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise SystemExit(f"{script} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        d = json.load(open(f.name))
        return d["times"], d["phases"]


def _program_ratios(times, phases, skip=5, before=4):
    """The four ratios of one run. The tracer's windows (`op-level k`, `cheap k`, `after k`):
    op-level = its first iteration over the median of the `before` iterations just before the
    window (this machine drifts by several percent over seconds); cheap tier = the median of
    its iterations over the median of the plain ones around them (those `before` and the
    window's "after" ones but their first two), averaged over the windows; after removal = the
    windows' "after" iterations (their first two skipped) over the plain ones before the first
    window; watch steady = the mean of the watched iterations over the mean of the plain ones
    interleaved with them."""
    plain = statistics.median(t for i, (t, p) in enumerate(zip(times, phases)) if p == "plain" and i >= skip)
    op_level, cheap, after = [], [], []
    k = 0
    while f"op-level {k}" in phases:
        start = phases.index(f"op-level {k}")
        ahead = times[max(skip, start - before) : start]
        op_level.append(times[start] / statistics.median(ahead))
        window = [t for t, p in zip(times, phases) if p == f"cheap {k}"]
        later = [t for t, p in zip(times, phases) if p == f"after {k}"][2:]
        if window:
            cheap.append(statistics.median(window) / statistics.median(ahead + later))
        after += later
        k += 1
    block = 4  # watch: the blocks after its first (which includes its first sight of the optimizers)
    on = [t for t, p in zip(times, phases) if p == "watch"][block:]
    off = [t for t, p in zip(times, phases) if p == "unwatched"][block:]
    nan = float("nan")
    return {
        "op-level": statistics.mean(op_level) if op_level else nan,
        "cheap tier": statistics.mean(cheap) if cheap else nan,
        "after removal": statistics.median(after) / plain if after else nan,
        "watch steady": statistics.mean(on) / statistics.mean(off) if on and off else nan,
    }, plain


def bench_programs(rounds=5, against=None):
    """Real programs, their training code unmodified, each observed inside its own process
    against its own plain iterations (bench/programs/_timing.py): this machine's speed differs
    between processes by more than the effects measured (the same plain iteration took 64-80
    ms in four processes in a row, and two processes run side by side on its two cores
    differed by up to 27%). Per run, over the tracer's three windows: op-level = its first
    iteration over the iterations just before the window, cheap tier = the median of the rest
    of its window over the plain iterations around it; after removal = the iterations after its
    hooks are removed, over the plain ones before the first window; watch steady = the mean of iterations under
    `gradsleuth.watch()` over the mean of the plain ones interleaved with them, in blocks of 4
    (a mean: the sampled update-ratio step counts). The median over `rounds` runs is printed.

    `against`: a directory holding another build of the package (`--against DIR`, e.g. a copy
    of `python/` from an earlier commit, its `_core` built): measured in the same rounds, and
    printed first (before/after under the same conditions)."""
    import os

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
    print(
        f"\n## real programs: ratio to the same process's plain iterations (median of {rounds} runs), torch",
        torch.__version__,
        "CPU, 1 thread",
    )
    cols = ("op-level", "cheap tier", "after removal", "watch steady")
    builds = {"this build": None} if not against else {f"against {against}": against, "this build": None}
    rows = {b: [] for b in builds}
    for name in PROGRAMS:
        script = os.path.join(here, name + ".py")
        got = {b: [] for b in builds}
        for _ in range(rounds):
            for b, pkg in builds.items():
                got[b].append(_program_ratios(*_program_times(script, pkg)))
        for b in builds:
            ratios = {c: statistics.median(r[c] for r, _ in got[b]) for c in cols}
            rows[b].append((name, statistics.median(p for _, p in got[b]) * 1e3, ratios))
    w = max(len(n) for n in PROGRAMS) + 1
    print(f"{'program':{w}}{'plain ms/it':>12}" + "".join(f"{c:>15}" for c in cols))
    for b in builds:
        if len(builds) > 1:
            print(f"-- {b}")
        worst = dict.fromkeys(cols, 0.0)
        for name, ms, ratios in rows[b]:
            for c in cols:
                if ratios[c] == ratios[c]:
                    worst[c] = max(worst[c], ratios[c])
            print(f"{name:{w}}{ms:12.1f}" + "".join(f"{ratios[c]:14.2f}x" for c in cols))
        print(f"{'worst:':{w}}" + " " * 12 + "".join(f"{worst[c]:14.2f}x" for c in cols))
    print(f"{'goals:':{w}}" + " " * 12 + "".join(f"{'<=' + format(PROGRAM_GOALS[c], '.2f'):>14}x" for c in cols))


def bench_where(repeats=5):
    """`gradsleuth where torch.relu` with a cold cache (YAML parsed, the ~430 MB libtorch_cpu.so's
    symbol table read) and a warm one, through the installed command and the Rust binary."""
    import os
    import subprocess
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cli = os.path.join(os.path.dirname(sys.executable), "gradsleuth")
    binary = os.path.join(root, "target", "release", "gradsleuth-cli")
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "gradsleuth-cli"], cwd=root, check=True)
    torch_dir = os.path.dirname(torch.__file__)
    print(f"\n## where torch.relu (ms; goals: cold < 1000, warm < 50); median of {repeats}")
    for label, cmd in (("gradsleuth (console script)", [cli]), ("gradsleuth-cli (Rust binary)", [binary])):
        cold, warm = [], []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, GRADSLEUTH_CACHE_DIR=cache)
                for bucket in (cold, warm):
                    t0 = time.perf_counter()
                    subprocess.run([*cmd, "where", "torch.relu", "--torch", torch_dir], env=env, capture_output=True)
                    bucket.append((time.perf_counter() - t0) * 1e3)
        print(f"{label:32} cold {statistics.median(cold):7.1f}   warm {statistics.median(warm):7.1f}")


def bench_install(repeats=3):
    """A user's first minutes: the wheel (abi3, manylinux2014) pip-installed into a fresh
    environment that already has torch, then the first report (`gradsleuth demo`), beside
    pip-installing ruff's wheel (a comparable single-binary Rust tool) the same way."""
    import glob
    import os
    import site
    import subprocess
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    with tempfile.TemporaryDirectory() as d:
        build = [os.path.join(bin_dir, "maturin"), "build", "--release", "--zig", "--compatibility", "manylinux2014"]
        subprocess.run([*build, "-q", "-o", d], cwd=root, env=env, check=True, capture_output=True)
        (ours,) = glob.glob(f"{d}/gradsleuth-*.whl")
        pip = [sys.executable, "-m", "pip"]
        subprocess.run([*pip, "download", "-q", "--no-deps", "-d", d, "ruff==0.17.5"], check=True)
        (ruff,) = glob.glob(f"{d}/ruff-*.whl")
        torch_site = site.getsitepackages()[0]

        def fresh(name):
            env_dir = os.path.join(d, name)
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", env_dir], check=True)
            (sp,) = glob.glob(f"{env_dir}/lib/python*/site-packages")
            # torch (and numpy) as the user's environment has them, without copying 5 GB.
            with open(os.path.join(sp, "torch-here.pth"), "w") as f:
                f.write(torch_site + "\n")
            return env_dir

        print(f"\n## install: pip install of a wheel into a fresh environment that has torch (s); median of {repeats}")
        times = {"gradsleuth": [], "ruff": [], "first report": []}
        for i in range(repeats):
            for label, wheel in (("gradsleuth", ours), ("ruff", ruff)):
                env_dir = fresh(f"{label}{i}")
                t0 = time.perf_counter()
                cmd = [*pip, "--python", f"{env_dir}/bin/python", "install", "-q", "--no-deps", "--no-index", wheel]
                subprocess.run(cmd, check=True)
                times[label].append(time.perf_counter() - t0)
                if label == "gradsleuth":
                    t0 = time.perf_counter()
                    demo = subprocess.run([f"{env_dir}/bin/gradsleuth", "demo"], cwd=d, capture_output=True, text=True)
                    assert "GS103" in demo.stdout, demo.stderr[-500:]
                    times["first report"].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{'pip install gradsleuth wheel':34}{med['gradsleuth']:8.2f}   ({os.path.getsize(ours) / 1e6:.1f} MB)")
        print(f"{'pip install ruff wheel (anchor)':34}{med['ruff']:8.2f}   ({os.path.getsize(ruff) / 1e6:.1f} MB)")
        print(f"{'ratio':34}{med['gradsleuth'] / med['ruff']:8.2f}x")
        print(f"{'then gradsleuth demo, first report':34}{med['first report']:8.2f}")
        print(f"{'install + first report':34}{med['gradsleuth'] + med['first report']:8.2f}")


def bench_explain(size_mb=100, repeats=5):
    """`gradsleuth explain` on a 100 MB torchrun-style log (streamed) and on a 2 KB traceback,
    through the installed command and through the Rust binary alone."""
    import os
    import random
    import subprocess
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cli = os.path.join(os.path.dirname(sys.executable), "gradsleuth")
    binary = os.path.join(root, "target", "release", "gradsleuth-cli")
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "gradsleuth-cli"], cwd=root, check=True)
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/home/user/project/train.py", line 57, in <module>\n'
        "    loss.backward()\n"
        '  File "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", line 623, in backward\n'
        "    torch.autograd.backward(\n"
        "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace "
        "operation: [torch.FloatTensor [64, 256]], which is output 0 of ReluBackward0, is at version 2; expected "
        "version 1 instead. Hint: enable anomaly detection to find the operation that failed to compute its gradient.\n"
    )
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as d:
        small = os.path.join(d, "traceback.log")
        with open(small, "w") as f:
            f.write((tb * 3)[:2048])
        big = os.path.join(d, "train.log")
        with open(big, "w") as f:
            size, i = 0, 0
            while size < size_mb * 1024 * 1024:
                i += 1
                if i % 20000 == 0:
                    chunk = "".join(f"[rank{i % 8}]: {line}\n" for line in tb.splitlines())
                else:
                    chunk = (
                        f"[rank{i % 8}]: epoch {i // 1000} step {i} loss {rng.random():.4f} lr 3.0e-4 "
                        f"grad_norm {rng.random() * 10:.3f} tokens/s 51234.5\n"
                    )
                f.write(chunk)
                size += len(chunk)
        print(f"\n## explain (median wall ms of {repeats}; goals: 100 MB < 2000 ms, 2 KB traceback < 20 ms)")
        for label, cmd in (("gradsleuth (console script)", cli), ("gradsleuth-cli (Rust binary)", binary)):
            for what, path in (("2 KB traceback", small), (f"{size_mb} MB log", big)):
                ts = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    subprocess.run([cmd, "explain", path], capture_output=True)
                    ts.append((time.perf_counter() - t0) * 1e3)
                print(f"{label:30} {what:16} {statistics.median(ts):9.1f} ms")


_RUNNER = """
import os, sys, time
timeout, cmd = float(sys.argv[1]), sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.execv(cmd[0], cmd)
while True:
    done, status, ru = os.wait4(pid, os.WNOHANG)
    if done:
        break
    if time.perf_counter() - t0 > timeout:
        os.killpg(pid, 9)
        os.wait4(pid, 0)
        print("timeout")
        sys.exit(0)
    time.sleep(0.002)
print(ru.ru_utime + ru.ru_stime, time.perf_counter() - t0, ru.ru_maxrss / 1024)
"""


def _measure(cmd, timeout):
    """CPU seconds (user+sys, children included), wall seconds, peak RSS (MB) of one command.

    Measured by a small launcher process: a child forked straight from this process (which
    holds torch, ~600 MB) would report this process's memory as its own peak."""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-S", "-E", "-c", _RUNNER, str(timeout), *cmd], capture_output=True, text=True
    ).stdout.split()
    if not out or out[0] == "timeout":
        return None
    cpu, wall, rss = map(float, out)
    return cpu, wall, rss


def _copy_py(files, src_root, dst_root):
    import os
    import shutil

    lines = 0
    for f in files:
        rel = os.path.relpath(f, src_root)
        dst = os.path.join(dst_root, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(f, dst)
        with open(f, "rb") as fh:
            lines += fh.read().count(b"\n")
    return lines


def bench_lint(subset_lines=100_000, torchfix_timeout=900, full_torchfix_timeout=120):
    """gradsleuth lint beside TorchFix and ruff, on the same copied files."""
    import os
    import tempfile

    bindir = os.path.dirname(sys.executable)
    torch_dir = os.path.dirname(torch.__file__)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(torch_dir) for f in fs if f.endswith(".py"))
    with tempfile.TemporaryDirectory() as tmp:
        full = os.path.join(tmp, "full")
        full_lines = _copy_py(files, os.path.dirname(torch_dir), full)
        # The subset: torch/nn, torch/optim, torch/autograd, ... in path order up to the limit.
        subset_files, n = [], 0
        preferred = [f for f in files if any(f"/torch/{p}/" in f for p in ("nn", "optim", "autograd", "utils/data"))]
        for f in preferred + [f for f in files if f not in set(preferred)]:
            if n >= subset_lines:
                break
            with open(f, "rb") as fh:
                n += fh.read().count(b"\n")
            subset_files.append(f)
        sub = os.path.join(tmp, "subset")
        sub_lines = _copy_py(subset_files, os.path.dirname(torch_dir), sub)
        tools = [
            (
                "gradsleuth lint",
                lambda p: [
                    os.path.join(bindir, "gradsleuth"),
                    "lint",
                    "--isolated",
                    "--fail-on",
                    "never",
                    "--format",
                    "json",
                    p,
                ],
            ),
            (
                "ruff --select E9,F",
                lambda p: [
                    os.path.join(bindir, "ruff"),
                    "check",
                    "--isolated",
                    "--select",
                    "E9,F",
                    "--no-cache",
                    "--exit-zero",
                    "-q",
                    p,
                ],
            ),
            ("TorchFix", lambda p: [os.path.join(bindir, "torchfix"), "--select", "ALL", p]),
        ]
        print(f"\n## lint: torch {torch.__version__} sources, {os.cpu_count()} cores (CPU s = user+sys incl. children)")
        head = f"{'CPU s':>9}{'wall s':>9}{'lines/CPU-s':>14}{'peak MB':>9}{'CPU vs gradsleuth':>19}"
        print(f"{'files':34}{'tool':22}{head}")
        for label, path, lines, limits in (
            (f"subset ({len(subset_files)} files, {sub_lines:,} lines)", sub, sub_lines, (60, 60, torchfix_timeout)),
            (f"all ({len(files)} files, {full_lines:,} lines)", full, full_lines, (120, 120, full_torchfix_timeout)),
        ):
            base = None
            for (tool, cmd), limit in zip(tools, limits):
                res = _measure(cmd(path), limit)
                if res is None:
                    print(f"{label:34}{tool:22}{'timed out after ' + str(limit) + ' s wall':>59}")
                    continue
                cpu, wall, rss = res
                base = base or cpu
                rate = lines / max(cpu, 1e-9)
                print(f"{label:34}{tool:22}{cpu:9.2f}{wall:9.2f}{rate:14,.0f}{rss:9.0f}{cpu / base:18.1f}x")
        print("goals: gradsleuth >= 500x TorchFix's throughput, CPU within 3x of ruff's")


_MERGE_MODEL = """
import torch, torch.nn as nn
class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(500)])
    def forward(self, x):
        for layer in self.layers:
            x = x + 0.05 * torch.tanh(layer(x))
        return x
model = Tower()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def bench_merge(ranks=1000):
    """Merging 1,000 rank captures of a 1,000-parameter model (500 Linear layers)."""
    import json
    import os
    import subprocess
    import tempfile

    bindir = os.path.dirname(sys.executable)
    gs = os.path.join(bindir, "gradsleuth")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "tower.py")
        with open(script, "w") as f:
            f.write(_MERGE_MODEL)
        base = os.path.join(tmp, "base.json")
        subprocess.run([gs, "run", "--save-capture", base, script], capture_output=True, check=False, cwd=tmp)
        with open(base) as f:
            capture = json.load(f)
        n_params = len(capture["tensors"])
        layers = [m for m in capture["modules"] if m["kind"] == "registered" and m["class"] == "Linear"]
        out = os.path.join(tmp, "ranks")
        os.makedirs(out)
        size = 0
        for r in range(ranks):
            capture["dist"] = {"rank": r, "world_size": ranks, "local_rank": r % 8, "hostname": f"node{r // 8}"}
            # Every 10th rank skips one layer: a divergence the merge must find among 1,000 ranks.
            for m in layers[:1]:
                m["runs"] = 0 if r % 10 == 3 else 3
            text = json.dumps(capture)
            size += len(text)
            with open(os.path.join(out, f"rank{r}.json"), "w") as f:
                f.write(text)
        loader = "import json, os, sys\nd = sys.argv[1]\nfor f in os.listdir(d):\n    json.load(open(f'{d}/{f}'))"
        print(f"\n## merge: {ranks} rank captures of a {n_params}-parameter model ({size / 1e6:.0f} MB of JSON)")
        print(f"{'':34}{'CPU s':>9}{'wall s':>9}{'peak MB':>9}")
        for label, cmd in (
            ("gradsleuth report DIR (merge)", [gs, "report", "--format", "json", "--out", os.devnull, out]),
            ("python json.load of the files", [sys.executable, "-c", loader, out]),
        ):
            res = _measure(cmd, 600)
            if res is None:
                print(f"{label:34}{'timed out':>27}")
                continue
            cpu, wall, rss = res
            print(f"{label:34}{cpu:9.2f}{wall:9.2f}{rss:9.0f}")
        print("goal: merge under 5 s and under 1 GB")


def _sample(items, sample):
    """Every k-th of `items` (sorted), `sample` of them; all when `sample` is 0."""
    if sample and len(items) > sample:
        step = len(items) / sample
        return [items[int(i * step)] for i in range(sample)]
    return items


def bench_repro(sample=12, budget=120.0, goal_lines=30, goal_seconds=120.0):
    """`gradsleuth repro` on the buggy cases of the case corpus (every k-th of them, sorted;
    `repro-all`: all): lines of the reduced program beside the original's, runs, seconds."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    cases = sorted(
        p
        for p in (root / "tests" / "cases").iterdir()
        if (p / "train.py").exists() and not p.name.startswith("control_")
    )
    cases = _sample(cases, sample)
    _repro_table(
        f"{len(cases)} buggy cases of the corpus",
        [(c.name, c / "train.py") for c in cases],
        budget,
        goal_lines,
        goal_seconds,
    )


def bench_repro_mutants(sample=12, budget=120.0, goal_lines=30, goal_seconds=120.0):
    """`gradsleuth repro` on mutants of third-party models (the mutation corpus's cache from
    `make eval`: every k-th valid mutant gradsleuth flags with an error, sorted): a training
    script that loads a model file copied from transformers, torchvision or timm, with the bug
    in that file. Beside the sizes: whether the kit's repro.py runs alone from an empty folder
    (its symptom assertion, when the kit has one, holding)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    cache = root / ".cache" / "mutate" / "mutants"
    found = []
    for folder in sorted(cache.iterdir()) if cache.is_dir() else []:
        try:
            meta = json.loads((folder / "meta.json").read_text())
            report = json.loads((folder / "report.json").read_text())
        except (OSError, ValueError):
            continue
        if meta.get("third_party") and any(f["severity"] == "error" for f in report.get("findings", [])):
            found.append(folder)
    if not found:
        print("\nrepro on mutants: no mutation corpus cached (run `make eval` first)")
        return
    folders = _sample(found, sample)
    _repro_table(
        f"{len(folders)} of {len(found)} flagged third-party mutants",
        [(f.name, f / "train.py") for f in folders],
        budget,
        goal_lines,
        goal_seconds,
        standalone=True,
    )


def _repro_table(what, scripts, budget, goal_lines, goal_seconds, standalone=False):
    import os
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    exe = str(Path(sys.executable).parent / "gradsleuth")
    rows = []
    print(f"\nrepro: {what}, budget {budget:.0f} s each")
    print(f"{'case':42}{'lines':>7}{'->':>4}{'kept':>6}{'runs':>6}{'s':>7}{'alone':>7}  finding")
    for name, script in scripts:
        text = script.read_text()
        original = sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            kit = os.path.join(d, "kit")
            proc = subprocess.run(
                [exe, "repro", "--budget", str(budget), "--out", kit, "--", str(script)],
                cwd=d, capture_output=True, text=True, timeout=budget * 3 + 120,
            )
            seconds = time.perf_counter() - t0
            m = re.search(r"gradsleuth repro: (\S+) (\S+) kept in (\d+) lines .*?, (\d+) runs", proc.stdout)
            alone = ""
            if m and standalone:
                # From an empty folder, with plain Python: it runs, and (when the kit says it
                # asserts the symptom) the assertion holds.
                empty = os.path.join(d, "empty")
                os.mkdir(empty)
                plain = subprocess.run(
                    [sys.executable, os.path.join(kit, "repro.py")],
                    cwd=empty, capture_output=True, text=True, timeout=budget + 120,
                )
                alone = "yes" if plain.returncode == 0 else "NO"
                if plain.returncode:
                    last = (plain.stderr.strip().splitlines() or ["?"])[-1][:100]
                    print(f"{'':42}repro.py alone: {last}")
        if proc.returncode != 0 or not m:
            why = (proc.stderr.strip().splitlines() or ["?"])[-1][:60]
            rows.append((name, original, None, seconds, False))
            print(f"{name:42}{original:7}{'':>4}{'-':>6}{'-':>6}{seconds:7.1f}{'':>7}  not reduced: {why}")
            continue
        kept = int(m.group(3))
        rows.append((name, original, kept, seconds, alone != "NO"))
        print(f"{name:42}{original:7}{'':>4}{kept:6}{m.group(4):>6}{seconds:7.1f}{alone:>7}  {m.group(1)} {m.group(2)}")
    done = [r for r in rows if r[2] is not None]
    good = [r for r in done if r[2] <= goal_lines and r[3] <= goal_seconds and r[4]]
    if done:
        sizes = sorted(r[2] for r in done)
        times = sorted(r[3] for r in done)
        print(f"lines kept: min {sizes[0]}, median {statistics.median(sizes):.0f}, max {sizes[-1]}; "
              f"original median {statistics.median(r[1] for r in done):.0f}")
        print(f"seconds: median {statistics.median(times):.0f}, max {times[-1]:.0f}")
        if standalone:
            print(f"runs alone from an empty folder: {sum(r[4] for r in done)}/{len(done)}")
    share = len(good) / len(rows) if rows else 0.0
    print(
        f"goal: at least 80% of cases at most {goal_lines} lines within {goal_seconds:.0f} s"
        f"{' and running alone' if standalone else ''}: {len(good)}/{len(rows)} = {share:.0%}"
    )


_BISECT_SCRIPT = """
import argparse, os, tempfile
import torch
from torch import nn

config = argparse.Namespace(hidden=16, lr=0.1)
model = nn.Sequential(nn.Linear(8, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 1))
path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
torch.save({"model": model.state_dict(), "config": config}, path)
model.load_state_dict(torch.load(path)["model"])
opt = torch.optim.SGD(model.parameters(), lr=config.lr)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(3):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def bench_bisect(good="2.5.1", bad="2.6.0"):
    """`gradsleuth bisect` over two torch releases (the weights-only default of 2.6): seconds
    per tried version with a cold overlay cache (each release installed with `uv pip install
    --target` from uv's download cache, then run) and a warm one (the overlays kept), beside a
    plain `pip install torch==BAD` into a new venv (the anchor: what bisecting by hand costs
    per version before the script even runs)."""
    import json
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    bin_dir = Path(sys.executable).parent
    uv_cache = subprocess.run([str(bin_dir / "uv"), "cache", "dir"], capture_output=True, text=True).stdout.strip()
    print(f"\n## bisect: torch {good} (good) .. {bad} (bad), seconds per tried version")
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "train.py"
        script.write_text(_BISECT_SCRIPT)
        # Only gradsleuth's overlay cache starts empty; uv's download cache stays where it is.
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(d, "cache"), UV_CACHE_DIR=uv_cache)
        per_version = {}
        for label in ("cold", "warm"):
            out = Path(d) / f"{label}.json"
            t0 = time.perf_counter()
            proc = subprocess.run(
                [str(bin_dir / "gradsleuth"), "bisect", "--good", good, "--bad", bad, "--format", "json",
                 "--out", str(out), "--", str(script)],
                cwd=d, env=env, capture_output=True, text=True, timeout=3600,
            )
            seconds = time.perf_counter() - t0
            if proc.returncode != 0:
                print(f"bisect failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
                return
            report = json.loads(out.read_text())
            tried = len(report["tried"])
            per_version[label] = seconds / tried
            print(f"{'gradsleuth bisect, ' + label + ' cache':34}{seconds:8.1f} s for {tried} versions: "
                  f"{per_version[label]:.1f} s each (first bad {report['first_bad']})")
        venv = os.path.join(d, "venv")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        pip = subprocess.run(
            [os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check", f"torch=={bad}"],
            capture_output=True, text=True, timeout=3600,
        )
        anchor = time.perf_counter() - t0
        if pip.returncode != 0:
            print(f"pip install torch=={bad} failed: {(pip.stderr.strip().splitlines() or ['?'])[-1]}")
            return
        print(f"{'plain venv + pip install (anchor)':34}{anchor:8.1f} s for 1 version (no run)")
        for label, v in per_version.items():
            print(f"{'ratio, ' + label:34}{v / anchor:8.2f}x")


if __name__ == "__main__":
    args = sys.argv[1:]
    against = None
    if "--against" in args:
        i = args.index("--against")
        against = args[i + 1]
        del args[i : i + 2]
    rounds = 5
    if "--rounds" in args:
        i = args.index("--rounds")
        rounds = int(args[i + 1])
        del args[i : i + 2]
    which = args or [
        "walk", "step", "op", "watch", "programs", "graph", "where", "explain", "merge", "lint", "install", "repro",
        "bisect",
    ]
    import warnings

    warnings.filterwarnings("ignore")
    if "walk" in which:
        bench_walk()
    if "step" in which:
        bench_step()
    if "op" in which:
        bench_op()
    if "watch" in which:
        bench_watch()
    if "programs" in which:
        bench_programs(rounds=rounds, against=against)
    if "graph" in which:
        bench_graph()
    if "where" in which:
        bench_where()
    if "explain" in which:
        bench_explain()
    if "merge" in which:
        bench_merge()
    if "lint" in which:
        bench_lint()
    if "install" in which:
        bench_install()
    if "repro" in which:
        bench_repro()
    if "bisect" in which:
        bench_bisect()
    if "repro-all" in which:
        bench_repro(sample=0)
    if "repro-mutants" in which:
        bench_repro_mutants()
