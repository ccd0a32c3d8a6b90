"""`python -m gradsleuth._oracle`: runs candidate scripts for `gradsleuth repro` without paying
torch's import for each. torch and the tracer are imported once; each request (a JSON line on
standard input: script, args, run configuration path, log path, timeout) forks a child that runs
the candidate exactly as `gradsleuth run` does (`_run.main`) and writes its capture; the answer
is a JSON line with the child's exit status. The parent computes nothing with torch, so the
fork copies no thread pool. Each child tells the server which installed modules of the script's
packages it imported (whatever the way: a model file loaded by path, a lazy package), and the
server imports them once for the candidates after it: a transformers model file's imports cost
2 s per candidate otherwise.

`observe` is what a script instrumented by repro's first pass calls at each place it takes data
(`gradsleuth_repro::data`): it describes the first value seen there (no tensor data: shape,
dtype, device, range) as a JSON line for the reducer, which rebuilds it."""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time

# `observe` and `observe_value`, which an instrumented script calls, are Rust's
# (`gradsleuth._core`, crates/gradsleuth-py/src/observe.rs).
from gradsleuth._core import observe, observe_value  # noqa: F401

# Modules a candidate imported that the server could not import on its own: not tried again.
_unimportable: set[str] = set()


def _learned_path(req: dict) -> str:
    return os.path.join(os.path.dirname(req["config"]), "imported.json")


def _tell_imports(req: dict, before: set[str]) -> None:
    """Writes the installed modules this candidate imported, of the packages the script imports
    (a file it loads by path imports `transformers.modeling_utils`, a lazy package its
    submodules on access): the server imports them once for the candidates after it. Not a
    module whose file is the script's (a copy of a library file loaded under the library's
    name), nor one of another package (one that starts threads at import would make forking
    unsafe)."""
    import sysconfig

    roots = tuple(
        os.path.realpath(p) + os.sep
        for k in ("purelib", "platlib", "stdlib", "platstdlib")
        if (p := sysconfig.get_paths().get(k))
    )
    tops = {e.partition(":")[0].split(".")[0] for e in req.get("preload", [])}
    names = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name in before or name.split(".")[0] not in tops or not isinstance(file, str):
            continue
        if os.path.realpath(file).startswith(roots):
            names.append(name)
    with open(_learned_path(req), "w", encoding="utf-8") as f:
        json.dump(names, f)


def _learn_imports(req: dict) -> None:
    """Imports what the last candidate told (`_tell_imports`), once."""
    try:
        with open(_learned_path(req), encoding="utf-8") as f:
            names = json.load(f)
        os.unlink(_learned_path(req))
    except (OSError, ValueError):
        return
    for name in names:
        if name not in sys.modules and name not in _unimportable:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a candidate imports it itself
                _unimportable.add(name)


def _child(req: dict) -> int:
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    # The requests arrive on standard input: the candidate reads nothing from it.
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the child's whole life
    os.environ["GRADSLEUTH_RUN_CONFIG"] = req["config"]
    if req.get("observe"):
        os.environ["GRADSLEUTH_OBSERVE"] = req["observe"]
    import random

    import torch

    from gradsleuth import _run

    # Every candidate starts from the same random state, as repro.py does (`kit::seed`): a
    # symptom that depends on a draw holds or not for the program, not for the run.
    random.seed(0)
    torch.manual_seed(0)
    if (np := sys.modules.get("numpy")) is not None:
        np.random.seed(0)
    before = set(sys.modules)
    _run.before_stop.append(lambda: _tell_imports(req, before))
    return _run.main(["--", req["script"], *req.get("args", [])])


def main() -> int:
    import torch  # noqa: F401 - imported once, before any fork

    from gradsleuth import _run, _tracer  # noqa: F401 - the same

    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        # The installed packages the script imports, once, so each candidate does not pay
        # for them again (one that fails to import is left to the candidate).
        # `module:name`: a name imported from a module, read once (a lazily loaded package
        # imports its module then).
        for entry in req.get("preload", []):
            name, _, attr = entry.partition(":")
            try:
                module = sys.modules.get(name) or importlib.import_module(name)
                if attr:
                    getattr(module, attr, None)
            except Exception:  # noqa: BLE001, S112 - the candidate will raise it itself
                continue
        pid = os.fork()
        if pid == 0:
            code = 1
            before = set(sys.modules)
            try:
                code = _child(req) or 0
            finally:
                try:
                    _tell_imports(req, before)
                finally:
                    os._exit(code)
        deadline = time.monotonic() + float(req.get("timeout", 60))
        status: int | str | None = None
        while status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = "timeout"
            else:
                time.sleep(0.005)
        out.write(json.dumps({"status": status}) + "\n")
        out.flush()
        _learn_imports(req)
    return 0


if __name__ == "__main__":
    sys.exit(main())
