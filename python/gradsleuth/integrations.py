"""Framework callbacks: the diagnosis `gradsleuth run` gives, from inside a Hugging Face
`Trainer` or a Lightning `Trainer`, for users who prefer code to a wrapper command.

    from gradsleuth.integrations import HuggingFaceCallback, LightningCallback

    Trainer(model=model, args=args, train_dataset=ds, callbacks=[HuggingFaceCallback(steps=3)])
    L.Trainer(max_epochs=1, callbacks=[LightningCallback(steps=3)]).fit(module, loader)

The tracer starts when training starts, over the framework's model and optimizers, and stops
by itself after `steps` optimizer steps; then the report is printed and written to the run's
output folder as `gradsleuth-report.json` and `gradsleuth-report.html` (`callback.report` holds
it). In a distributed job every rank observes and the first rank reports. For an accelerate
loop, or any hand-written loop, `with gradsleuth.trace(steps=3) as t:` around it does the same.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gradsleuth import _core


class _Session:
    """One observation: the tracer over a framework's model and optimizers, and the report
    when it ends."""

    def __init__(self, steps: int):
        self.steps = steps
        self.report: _core.Report | None = None
        self._rec: Any = None
        self._tracer: Any = None

    def start(self, model, optimizers) -> None:
        from gradsleuth._tracer import Tracer

        if self._tracer is not None or model is None:
            return
        self._rec = _core.Recorder("diagnose", self.steps)
        self._tracer = Tracer(self._rec, self.steps).start()
        self._tracer.add_root(model, name="model")
        for o in optimizers:
            # accelerate's (and so the HF Trainer's) optimizer wraps torch's.
            inner = getattr(o, "optimizer", o)
            self._tracer.add_optimizer(inner, None)

    def poll(self, out_dir: str | None, main: bool) -> None:
        if self._tracer is not None and self.report is None and self._tracer.done:
            self._emit(out_dir, main)

    def end(self, out_dir: str | None, main: bool) -> None:
        if self._tracer is not None and self.report is None:
            self._tracer.finish()
            self._emit(out_dir, main)

    def _emit(self, out_dir: str | None, main: bool) -> None:
        self.report = self._rec.report()
        if not main:
            return
        print(self.report.render(), flush=True)
        if out_dir:
            try:
                os.makedirs(out_dir, exist_ok=True)
                with open(os.path.join(out_dir, "gradsleuth-report.json"), "w", encoding="utf-8") as f:
                    f.write(self.report.to_json())
                with open(os.path.join(out_dir, "gradsleuth-report.html"), "w", encoding="utf-8") as f:
                    f.write(self.report.render("html"))
            except OSError as e:
                print(f"gradsleuth: cannot write the report to {out_dir}: {e}", file=sys.stderr)


def HuggingFaceCallback(steps: int = 3):
    """A `transformers.TrainerCallback` that diagnoses the first `steps` optimizer steps."""
    from transformers import TrainerCallback

    class GradsleuthCallback(TrainerCallback):
        def __init__(self):
            self.session = _Session(steps)

        @property
        def report(self) -> _core.Report | None:
            return self.session.report

        def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
            self.session.start(model, [optimizer] if optimizer is not None else [])

        def on_step_end(self, args, state, control, **kwargs):
            self.session.poll(args.output_dir, state.is_world_process_zero)

        def on_train_end(self, args, state, control, **kwargs):
            self.session.end(args.output_dir, state.is_world_process_zero)

    return GradsleuthCallback()


def LightningCallback(steps: int = 3):
    """A Lightning `Callback` (for `lightning` or `pytorch_lightning`) that diagnoses the
    first `steps` optimizer steps of `fit`."""
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl  # type: ignore[no-redef]

    class GradsleuthCallback(pl.Callback):
        def __init__(self):
            self.session = _Session(steps)

        @property
        def report(self) -> _core.Report | None:
            return self.session.report

        def on_train_start(self, trainer, pl_module):
            self.session.start(pl_module, list(trainer.optimizers))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.session.poll(trainer.default_root_dir, trainer.is_global_zero)

        def on_train_end(self, trainer, pl_module):
            self.session.end(trainer.default_root_dir, trainer.is_global_zero)

    return GradsleuthCallback()
