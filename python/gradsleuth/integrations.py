"""Framework callbacks: the diagnosis `gradsleuth run` gives, from inside a Hugging Face
`Trainer` or a Lightning `Trainer`, for users who prefer code to a wrapper command.

    from gradsleuth.integrations import HuggingFaceCallback, LightningCallback

    Trainer(model=model, args=args, train_dataset=ds, callbacks=[HuggingFaceCallback(steps=3)])
    L.Trainer(max_epochs=1, callbacks=[LightningCallback(steps=3)]).fit(module, loader)

The tracer starts when training starts, over the framework's model and optimizers, and stops
by itself after `steps` optimizer steps; then (with `watch=True`: when training ends, with
gradient health over all of it) the report is printed and written to the run's
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

    def __init__(self, steps: int, watch: bool = False, log_dir: str | None = None):
        self.steps = steps
        self.report: _core.Report | None = None
        self._rec: Any = None
        self._tracer: Any = None
        self._watch_asked = watch
        self._log_dir = log_dir
        self._watch: Any = None

    def start(self, model, optimizers) -> None:
        from gradsleuth._tracer import Tracer

        if self._tracer is not None or model is None:
            return
        # accelerate's (and so the HF Trainer's) optimizer wraps torch's.
        inner = [getattr(o, "optimizer", o) for o in optimizers]
        self._rec = _core.Recorder("diagnose", self.steps)
        # With watch, as under `run --watch`: no gradient watch between backward and step.
        tracer = Tracer(self._rec, self.steps, watch_gradients=not self._watch_asked)
        if self._watch_asked:
            # As `gradsleuth run --watch`: watch starts first (the tracer removes its optimizer
            # hooks from inside one when its observation ends, safe only for the last hook).
            from gradsleuth._watch import Watch

            self._watch = Watch([model], inner, log_dir=self._log_dir, status=False)
            self._watch.tracer = tracer
            # Layers a framework calls one by one (a LightningModule's training_step) are the
            # roots a step can be re-run from, as under `run --watch`.
            tracer.on_root = self._watch.root_seen
            self._watch.start()
        self._tracer = tracer.start()
        self._tracer.add_root(model, name="model")
        for o in inner:
            self._tracer.add_optimizer(o, None)

    def poll(self, out_dir: str | None, main: bool) -> None:
        # Watching, the report waits for the end of training (watch covers all of it).
        if self._tracer is not None and self.report is None and self._tracer.done and self._watch is None:
            self._emit(out_dir, main)

    def end(self, out_dir: str | None, main: bool) -> None:
        if self._tracer is not None and self.report is None:
            self._tracer.finish()
            if self._watch is not None:
                self._watch.close()
                self._watch.attach(self._rec)
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


def HuggingFaceCallback(steps: int = 3, watch: bool = False, log_dir: str | None = None):
    """A `transformers.TrainerCallback` that diagnoses the first `steps` optimizer steps; with
    `watch=True` it also watches gradient health over the whole of training (as `gradsleuth
    run --watch`: anomalies, the first NaN traced to its op and line; `log_dir` writes
    TensorBoard events) and reports when training ends."""
    from transformers import TrainerCallback

    class GradsleuthCallback(TrainerCallback):
        def __init__(self):
            self.session = _Session(steps, watch, log_dir)

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


def LightningCallback(steps: int = 3, watch: bool = False, log_dir: str | None = None):
    """A Lightning `Callback` (for `lightning` or `pytorch_lightning`) that diagnoses the
    first `steps` optimizer steps of `fit`; `watch=True` as for `HuggingFaceCallback`."""
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl  # type: ignore[no-redef]

    class GradsleuthCallback(pl.Callback):
        def __init__(self):
            self.session = _Session(steps, watch, log_dir)

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
