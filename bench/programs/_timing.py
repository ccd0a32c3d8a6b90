"""Per-iteration wall times for the real-program benchmark (`bench/run.py programs`).

Each program wraps its training iteration in `iterations(n)`; the times go, as JSON, to the file
named by `GS_BENCH_TIMES` (nothing is written when it is unset, so a program runs as a plain
script too). One CPU thread, so that a step's time is not a scheduling lottery.

`GS_BENCH_OBSERVE=1` measures gradsleuth inside the program's own process, against its own
plain iterations (this machine's speed differs between processes by more than the effects
measured, and drifts within one by up to 10% over seconds): iterations 0-14 run plain; then
three windows of 20 iterations, each starting the tracer `gradsleuth run` uses (told of the
program's optimizers, as `gradsleuth run` is when they are made; its first
iteration op-level, then ten of the hook-only tier, then its hooks removed and the rest of the
window plain again, "after"), so each window is compared with the plain iterations around it;
then blocks of 4 iterations alternate plain and under `gradsleuth.watch()` (every optimizer, the
global hooks; 24 watched iterations, so one samples the update ratios). Each iteration's phase
is written beside its time, a window's number beside it; starting and removing hooks happens
between timed iterations.

`GS_BENCH_PROFILE=I` profiles iteration I (cProfile, the top functions by own time, on
stderr; `GS_BENCH_SORT=cumulative` and `GS_BENCH_ROWS=N` change the order and the length):
where an observed iteration's time goes, e.g.
`GS_BENCH_PROFILE=0 gradsleuth run bench/programs/vae.py`.
"""

from __future__ import annotations

import atexit
import json
import os
import time
import weakref

import torch

torch.set_num_threads(1)
_times: list[float] = []
_phases: list[str] = []
_out = os.environ.get("GS_BENCH_TIMES")
OBSERVE_AT, WINDOW, WINDOWS, WATCH_BLOCK, WATCH_BLOCKS = 15, 20, 3, 4, 12
WATCH_FROM = OBSERVE_AT + WINDOW * WINDOWS
# The tracer's window: its op-level iteration, then ten cheap-tier ones (one iteration on this
# machine varies by +-8%, so five left the cheap tier's figure within noise of its 1.03x goal:
# "after removal", plain against plain, read 0.88x-1.11x), then nine after its hooks are removed.
OBSERVED_STEPS = 11


class _Observer:
    """Starts the tracer and toggles watch at the iterations the schedule above names."""

    def __init__(self):
        self.tracer = None
        self.watch = None
        self.optimizers: list = []

    def before(self, i: int) -> str:
        from gradsleuth._core import Recorder
        from gradsleuth._tracer import Tracer
        from gradsleuth._watch import Watch

        window = (i - OBSERVE_AT) // WINDOW
        if i == 0:
            # Found before the first timed iteration: walking every object of the process
            # evicts the caches, and the iteration after it would pay for that.
            self.optimizers = [weakref.ref(o) for o in _optimizers()]
        if i < WATCH_FROM and i >= OBSERVE_AT and (i - OBSERVE_AT) % WINDOW == 0:
            if self.tracer is not None and not self.tracer.done:
                self.tracer.finish()
            self.tracer = Tracer(Recorder("run", OBSERVED_STEPS), OBSERVED_STEPS).start()
            # `gradsleuth run` sees the optimizers made (its tracer starts before the script):
            # told of those that exist, the op-level iteration runs through their steps, as
            # it does there (not knowing any, it ended at the first backward).
            live = [o for r in self.optimizers if (o := r()) is not None]
            for opt in live or _optimizers():
                self.tracer.add_optimizer(opt)
            return f"op-level {window}"
        if self.tracer is not None and not self.tracer.done:
            return f"cheap {window}"
        if i < WATCH_FROM:
            return "plain" if self.tracer is None else f"after {window}"
        on = ((i - WATCH_FROM) // WATCH_BLOCK) % 2 == 1
        if on and (self.watch is None or self.watch.closed):
            if self.watch is None:
                self.watch = Watch(status=False)
            self.watch.closed = False
            self.watch.start()
        elif not on and self.watch is not None and not self.watch.closed:
            self.watch.close()
        return "watch" if on else "unwatched"


def _optimizers() -> list:
    """The program's live torch optimizers (found before the first iteration, and again at a
    window only if none was alive then; never inside a timed iteration)."""
    import gc

    return [o for o in gc.get_objects() if isinstance(o, torch.optim.Optimizer)]


def iterations(n_default: int):
    """The iteration indices, each timed from its start to the next one's start."""
    observer = _Observer() if os.environ.get("GS_BENCH_OBSERVE") else None
    n = int(os.environ.get("GS_BENCH_ITERS", n_default))
    if observer is not None:
        n = WATCH_FROM + WATCH_BLOCK * WATCH_BLOCKS
    profiled = int(os.environ.get("GS_BENCH_PROFILE", -1))
    for i in range(n):
        prof = None
        if i == profiled:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        _phases.append(observer.before(i) if observer is not None else "plain")
        t0 = time.perf_counter()
        yield i
        _times.append(time.perf_counter() - t0)
        if prof is not None:
            import pstats
            import sys

            prof.disable()
            order = os.environ.get("GS_BENCH_SORT", "tottime")
            rows = int(os.environ.get("GS_BENCH_ROWS", 25))
            pstats.Stats(prof, stream=sys.stderr).sort_stats(order).print_stats(rows)
    if observer is not None and observer.watch is not None:
        observer.watch.close()


@atexit.register
def _save():
    if _out:
        with open(_out, "w") as f:
            json.dump({"times": _times, "phases": _phases}, f)
