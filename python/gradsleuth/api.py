"""The Python API: `diagnose`, `trace`, `assert_learning` and `Report`.

Each runs the same tracer as `gradsleuth run` in-process and hands the capture to the Rust
analysis; `Report` (a Rust class, `gradsleuth._core.Report`) holds the report and the capture
and prints as the terminal report.
"""

from __future__ import annotations

import sys

from gradsleuth import _core
from gradsleuth._sites import record_error

Report = _core.Report


class trace:
    """Traces the training steps run inside the block.

        with gradsleuth.trace(steps=3) as t:
            for batch in loader: ...
        print(t.report())

    Observation stops by itself after `steps` optimizer steps (or backward calls without an
    optimizer); the rest of the block runs at full speed.
    """

    def __init__(self, steps: int = 3, models=(), optimizers=()):
        self.steps = steps
        self._models = list(models)
        self._optimizers = list(optimizers)
        self._tracer = None
        self._rec = None
        self._report = None

    def __enter__(self):
        from gradsleuth._core import Recorder
        from gradsleuth._tracer import Tracer

        self._rec = Recorder("diagnose", self.steps)
        self._tracer = Tracer(self._rec, self.steps).start()
        for m in self._models:
            self._tracer.add_root(m)
        frame = sys._getframe(1)
        for o in self._optimizers:
            self._tracer.add_optimizer(o, frame)
        return self

    def __exit__(self, exc_type, exc, tb):
        self._tracer.finish()
        if exc is not None:
            record_error(self._rec, exc)
        return False

    def report(self) -> Report:
        if self._rec is None:
            raise RuntimeError("trace() has not run yet")
        if self._tracer is not None and not self._tracer.done:
            self._tracer.finish()
        return self._rec.report()


def _forward_loss(model, batch, loss_fn):
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        x, y = batch
        return loss_fn(model(x), y)
    if isinstance(batch, dict):
        return loss_fn(model(**batch), batch)
    return loss_fn(model(batch))


def diagnose(model, batch, loss_fn, optimizer=None, steps: int = 1, restore: bool = True) -> Report:
    """Runs `steps` training steps on `batch` under the tracer and returns the diagnosis.

    `batch` is `(inputs, targets)` (loss = `loss_fn(model(inputs), targets)`), a dict
    (`loss_fn(model(**batch), batch)`) or one input (`loss_fn(model(batch))`). With
    `restore=True` (the default) the model's tensors, the gradients and the optimizer state are
    put back afterwards, so diagnosing does not train your model.
    """
    import torch

    from gradsleuth._core import Recorder
    from gradsleuth._tracer import Tracer

    rec = Recorder("diagnose", steps)
    tracer = Tracer(rec, steps).start()
    tracer.add_root(model, name="model")
    if optimizer is not None:
        tracer.add_optimizer(optimizer, sys._getframe(1))
    saved = _snapshot(tracer, model, optimizer) if restore else None
    try:
        for _ in range(steps):
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            loss = _forward_loss(model, batch, loss_fn)
            loss.backward()
            if optimizer is not None:
                optimizer.step()
    except Exception as e:  # noqa: BLE001 - the failure is part of the diagnosis
        record_error(rec, e)
    finally:
        tracer.finish()
        if saved is not None:
            with torch.no_grad():
                _restore(saved, optimizer)
    return rec.report()


def assert_learning(model, batch, loss_fn, optimizer=None, steps: int = 2) -> Report:
    """For users' unit tests: raises AssertionError with the rendered report unless every
    trainable parameter learns (no error or warning findings)."""
    report = diagnose(model, batch, loss_fn, optimizer, steps=steps)
    if not report.ok or report.error:
        raise AssertionError("gradsleuth: not every parameter learns\n\n" + str(report))
    return report


def _snapshot(tracer, model, optimizer):
    import copy

    tensors = {}
    for t in list(model.parameters()) + list(model.buffers()):
        tensors[id(t)] = (t, t.detach().clone(), None if t.grad is None else t.grad.detach().clone())
    for k in list(tracer._objs):
        t = tracer.obj(k)
        if t is not None and hasattr(t, "grad") and id(t) not in tensors and getattr(t, "is_leaf", False):
            tensors[id(t)] = (t, t.detach().clone(), None if t.grad is None else t.grad.detach().clone())
    opt_state = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
    return tensors, opt_state


def _restore(saved, optimizer):
    tensors, opt_state = saved
    for t, value, grad in tensors.values():
        t.copy_(value)
        t.grad = grad
    if optimizer is not None and opt_state is not None:
        optimizer.load_state_dict(opt_state)
