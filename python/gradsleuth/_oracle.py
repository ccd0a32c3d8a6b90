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
dtype, device, range) as a JSON line for the reducer, which rebuilds it in Rust."""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time

_seen: set[int] = set()
# Modules a candidate imported that the server could not import on its own: not tried again.
_unimportable: set[str] = set()


def _describe(v: object, depth: int = 0) -> dict:
    import torch

    if depth > 8:
        return {"other": type(v).__qualname__}
    if isinstance(v, torch.Tensor):
        d: dict = {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch."), "device": str(v.device)}
        d["grad"] = bool(v.requires_grad and v.grad_fn is None)
        if v.grad_fn is not None:
            # Computed from the model: not data, never rebuilt.
            return {"other": "computed tensor"}
        if v.numel() and not v.is_complex():
            t = v.detach()
            d["min"], d["max"] = float(t.min()), float(t.max())
        return {"tensor": d}
    if v is None or type(v) in (bool, int, str, float):
        r = _literal(v)
        return {"literal": r} if r is not None else {"other": type(v).__qualname__}
    if isinstance(v, (tuple, list)) and type(v) in (tuple, list):
        return {type(v).__name__: [_describe(x, depth + 1) for x in v]}
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {"dict": [[k, _describe(x, depth + 1)] for k, x in v.items()]}
    transformers = sys.modules.get("transformers")
    if transformers is not None and isinstance(v, transformers.PreTrainedModel):
        model = _model(v, transformers)
        if model is not None:
            return model
    return {"other": type(v).__qualname__}


def _exported(cls: type) -> str | None:
    """`package.Class` when the class is reachable so from its top-level package."""
    top = cls.__module__.split(".")[0]
    return f"{top}.{cls.__name__}" if getattr(sys.modules.get(top), cls.__name__, None) is cls else None


def _model(v: object, transformers: object) -> dict | None:
    config = v.config  # type: ignore[attr-defined]
    cls, config_cls = _exported(type(v)), _exported(type(config))
    if cls is None or config_cls is None:
        return None
    # The entries that differ from the config class's own defaults (a float32 dtype is the
    # default weights' dtype).
    defaults = type(config)().to_dict()
    entries = {
        k: x
        for k, x in config.to_dict().items()
        if (k not in defaults or defaults[k] != x)
        and not k.startswith("_")
        and k not in ("transformers_version", "architectures", "model_type")
        and not (k in ("dtype", "torch_dtype") and x in ("float32", None))
    }
    try:
        json.dumps(entries)
    except (TypeError, ValueError):
        return None
    return {"model": {"class": cls, "config_class": config_cls, "config": entries}}


def observe(site: int, value: object) -> None:
    """Called by an instrumented script: records the first value site `site` sees."""
    path = os.environ.get("GRADSLEUTH_OBSERVE")
    if not path or site in _seen:
        return
    _seen.add(site)
    try:
        line = json.dumps({"site": site, "value": _describe(value)})
    except Exception:  # noqa: BLE001 - an odd value is left as it is, never breaks the run
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


_UNSEEN = object()
_values: dict[int, object] = {}


def _literal(v: object, depth: int = 0) -> str | None:
    """The value as Python source when it is a literal (exact types only: an enum or a numpy
    number is not one)."""
    if v is None or type(v) in (bool, int, str):
        r = repr(v)
        return r if len(r) <= 200 else None
    if type(v) is float:
        return repr(v) if v == v and abs(v) != float("inf") else None
    if type(v) is tuple and depth == 0 and len(v) <= 8:
        parts = [_literal(x, 1) for x in v]
        if all(p is not None for p in parts):
            return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"  # type: ignore[arg-type]
    return None


def observe_value(site: int, value: object) -> object:
    """Called around an argument by an instrumented script: returns `value`, and records its
    literal, or that it has none or varied between calls."""
    path = os.environ.get("GRADSLEUTH_OBSERVE")
    if not path:
        return value
    r = _literal(value)
    old = _values.get(site, _UNSEEN)
    if old is _UNSEEN or (old is not None and old != r):
        state = r if old is _UNSEEN else None
        _values[site] = state
        described = {"literal": state} if state is not None else {"other": "not one literal"}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"site": site, "value": described}) + "\n")
    return value


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
