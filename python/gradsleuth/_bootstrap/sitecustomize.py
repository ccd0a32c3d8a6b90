"""gradsleuth's bootstrap for jobs another program starts (`gradsleuth run -- accelerate launch
... train.py`, `-- lightning run model ...`, `-- deepspeed ...`): `gradsleuth run` puts this
folder first on PYTHONPATH, so every interpreter of the job imports this module at start-up.
In the one whose main script is the job's training script, the tracer starts
(`gradsleuth._run.activate`); every other interpreter (the launcher, DataLoader workers) only
pays for reading an environment variable. Then the `sitecustomize` this one hides, if any, runs
as it would have (as coverage.py's and OpenTelemetry's bootstraps do)."""

import os
import sys


def _activate():
    if not os.environ.get("GRADSLEUTH_RUN_CONFIG"):
        return
    try:
        try:
            import gradsleuth  # noqa: F401
        except ImportError:
            # An interpreter without gradsleuth installed: the package this folder is part of,
            # after the interpreter's own packages (never in front of its torch).
            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        from gradsleuth._run import activate

        activate()
    except Exception as e:  # noqa: BLE001 - the job runs on without the tracer
        print(f"gradsleuth: the tracer could not start in this process: {type(e).__name__}: {e}", file=sys.stderr)


def _chain():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    spec.loader.exec_module(module)


_activate()
_chain()
