"""Per-iteration wall times for the real-program benchmark (`bench/run.py programs`).

Each program wraps its training iteration in `timed(it)`; the times go, as JSON, to the file
named by `GS_BENCH_TIMES` (nothing is written when it is unset, so a program runs as a plain
script too). One CPU thread, so that a step's time is not a scheduling lottery.
"""

from __future__ import annotations

import atexit
import json
import os
import time

import torch

torch.set_num_threads(1)
_times: list[float] = []
_out = os.environ.get("GS_BENCH_TIMES")


def iterations(n_default: int):
    """The iteration indices, each timed from its start to the next one's start."""
    n = int(os.environ.get("GS_BENCH_ITERS", n_default))
    for i in range(n):
        t0 = time.perf_counter()
        yield i
        _times.append(time.perf_counter() - t0)


@atexit.register
def _save():
    if _out:
        with open(_out, "w") as f:
            json.dump(_times, f)
