"""gradsleuth benchmarks, each side by side with its anchor in one run; ratios printed.

    make bench            # everything
    python bench/run.py walk|step

walk: an autograd graph of about 1,000,000 nodes: the Rust walk (`gradsleuth._core.walk`) vs a
      pure-Python BFS over `next_functions`, vs reading every node's `next_functions` once.
step: per-step cost of the three bench models (plain step = 1.00x) while gradsleuth observes,
      after its hooks are removed, and under `torch.autograd.detect_anomaly()`.
op:   the op-level step (every torch call recorded, as in the first observed step) beside a
      no-op Python TorchDispatchMode and `detect_anomaly()`.
explain: a 100 MB log and a 2 KB traceback, through the installed command and the Rust binary.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from gradsleuth._core import Recorder, walk
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


def _noop_dispatch(step, n):
    from torch.utils._python_dispatch import TorchDispatchMode

    class NoopDispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return median_ms(step, n, ctx=NoopDispatch)


def _anomaly(step, n):
    return median_ms(step, n, ctx=lambda: torch.autograd.detect_anomaly(check_nan=True))


def compare(title, modes, rounds=5, per_round=8):
    """Each mode beside the plain step, interleaved in rounds; medians and ratios."""
    print(f"\n## {title} (median ms; ratio to the plain step), torch", torch.__version__, "CPU, 1 thread")
    print(f"{'model':14}{'plain':>10}" + "".join(f"{label:>20}" for label, _ in modes))
    for name, make in MODELS:
        torch.manual_seed(0)
        model, data, loss_fn = make()
        step = step_fn(model, data, loss_fn)
        for _ in range(3):
            step()
        res = {"plain": []} | {label: [] for label, _ in modes}
        for _ in range(rounds):
            res["plain"].append(median_ms(step, per_round))
            for label, measure in modes:
                res[label].append(measure(step, per_round))
        p = statistics.median(res["plain"])
        cells = "".join(
            f"{statistics.median(res[label]):12.2f} ({statistics.median(res[label]) / p:4.2f}x)" for label, _ in modes
        )
        print(f"{name:14}{p:10.2f}{cells}")


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


if __name__ == "__main__":
    which = sys.argv[1:] or ["walk", "step", "op", "explain"]
    import warnings

    warnings.filterwarnings("ignore")
    if "walk" in which:
        bench_walk()
    if "step" in which:
        bench_step()
    if "op" in which:
        bench_op()
    if "explain" in which:
        bench_explain()
