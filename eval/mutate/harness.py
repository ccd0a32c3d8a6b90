"""The mutation harness: originals → mutants → oracle → gradsleuth (`run` and `lint`) → the table.

    python -m eval.mutate [--sample N] [--jobs 2] [--only SUBJECT,...] [--json OUT]

Everything is cached under `.cache/mutate/` (keyed by the sources and gradsleuth's build), so
a second run only re-runs what changed. Runs fork from one warm process (torch and every
target package imported once); a mutant's run is the same `gradsleuth._run` bootstrap and the
same analysis (`gradsleuth report` of its capture) that `gradsleuth run` uses.

A mutant is *valid* when the oracle shows a parameter that learns in the original and does not
in the mutant (`none`, `zero`, `stale`) or, for operators whose bug is an exception, an
exception in backward or in the step; *equivalent* when nothing observable changed; *broken*
when it raised something unrelated (a `.detach()` of a tuple). Only valid mutants are scored.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import operators as ops
from .subjects import Subject, script

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "mutate"
GRADSLEUTH = Path(sys.executable).parent / "gradsleuth"
SITES_PER_OPERATOR = 3
TIMEOUT = 180


# -- the warm process and its children ------------------------------------------------------------


def warm(subjects):
    import importlib

    import torch

    for s in subjects:
        if s.target:
            importlib.import_module(s.target)
    import gradsleuth._run  # noqa: F401
    import gradsleuth._tracer  # noqa: F401

    from . import oracle  # noqa: F401

    torch.set_num_threads(1)


def _child(task):
    kind, folder = task
    os.chdir(folder)
    out = os.open("stdout.txt" if kind == "oracle" else "run.stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open("stderr.txt" if kind == "oracle" else "run.stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(err, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    code = 0
    try:
        if kind == "oracle":
            from . import oracle

            meta = json.loads(Path("meta.json").read_text())
            oracle.observe("train.py", "oracle.json", cover=meta.get("cover", []))
        else:
            from gradsleuth import _run
            from gradsleuth._core import RUN_CONFIG_ENV

            Path("run.config").write_text(
                json.dumps(
                    {
                        "version": 1,
                        "capture": str(Path("capture.json").resolve()),
                        "steps": 3,
                        "stop_after": False,
                        "deep": False,
                        "watch": False,
                        "tensorboard": None,
                    }
                )
            )
            os.environ[RUN_CONFIG_ENV] = str(Path("run.config").resolve())
            code = _run.main(["--", "train.py"])
    except BaseException as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        code = 3 if not isinstance(e, SystemExit) else (e.code if isinstance(e.code, int) else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def run_all(tasks, jobs):
    """Runs (kind, folder) tasks in forked children, `jobs` at a time."""
    running = {}
    pending = list(tasks)
    done = 0
    t0 = time.time()
    while pending or running:
        while pending and len(running) < jobs:
            task = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                _child(task)
            running[pid] = (task, time.time())
        pid, _status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.02)
            now = time.time()
            for p, (_task, start) in list(running.items()):
                if now - start > TIMEOUT:
                    os.kill(p, signal.SIGKILL)
            continue
        if pid in running:
            del running[pid]
            done += 1
            if done % 25 == 0:
                print(f"  {done}/{len(tasks)} runs ({time.time() - t0:.0f} s)", file=sys.stderr)


# -- building the corpus ---------------------------------------------------------------------------


def _target_source(subject: Subject):
    import importlib

    mod = importlib.import_module(subject.target)
    path = Path(mod.__file__)
    return path.name, path.read_text()


def _key(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _gradsleuth_key() -> str:
    """Changes when gradsleuth does: its Python package and built extension."""
    import gradsleuth
    import gradsleuth._core

    pkg = Path(gradsleuth.__file__).parent
    h = hashlib.sha256()
    h.update(Path(gradsleuth._core.__file__).read_bytes())
    h.update(GRADSLEUTH.read_bytes() if GRADSLEUTH.exists() else b"")
    for f in sorted(pkg.glob("*")):
        if f.is_file() and f.suffix in (".py", ".so"):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


# The oracle's own source is part of what its verdicts depend on (read once per process).
_ORACLE_SRC = (Path(__file__).parent / "oracle.py").read_bytes()


def _write(folder: Path, files: dict, meta: dict):
    key = _key(json.dumps(files, sort_keys=True), json.dumps(meta, sort_keys=True), _ORACLE_SRC)
    stamp = folder / "key.txt"
    if stamp.exists() and stamp.read_text() == key:
        return False
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    stamp.write_text(key)
    return True


def originals(subjects, jobs):
    out = {}
    tasks = []
    for s in subjects:
        folder = CACHE / "originals" / s.name
        files = {}
        tname = None
        if s.target:
            tname, tsrc = _target_source(s)
            files[tname] = tsrc
        files["train.py"] = script(s, tname)
        cover = [str(folder / "train.py")] + ([str(folder / tname)] if tname else [])
        meta = {"subject": s.name, "package": s.package, "target_file": tname, "cover": cover}
        if _write(folder, files, meta) or not (folder / "oracle.json").exists():
            tasks.append(("oracle", folder))
        out[s.name] = folder
    run_all(tasks, jobs)
    return out


def _covered(oracle_res, path: Path) -> set[int]:
    return {n for f, n in oracle_res.get("covered", []) if f == str(path)}


def _spread(items, k):
    """k items spread evenly over the list (deterministic)."""
    if len(items) <= k:
        return list(items)
    step = len(items) / k
    return [items[int(i * step + step / 2)] for i in range(k)]


def mutants_of(subject: Subject, folder: Path, per_op: int):
    res = json.loads((folder / "oracle.json").read_text())
    meta = json.loads((folder / "meta.json").read_text())
    out = []
    train = (folder / "train.py").read_text()
    files = [("train.py", train)]
    if meta["target_file"]:
        files.insert(0, (meta["target_file"], (folder / meta["target_file"]).read_text()))
    facts = dict(res.get("facts") or {})
    children = facts.get("children", [])
    facts["head"] = children[-1] if children else None
    for fname, src in files:
        tree = ast.parse(src)
        covered = _covered(res, folder / fname)
        tname = ops.torch_name(tree)
        for name, op in ops.OPERATORS.items():
            made = []
            if op.kind == "code" and tname:
                for fn, stmt in code_sites_for(tree, covered, fname):
                    m = ops.apply_code(name, src, fn, stmt, fname, tname)
                    if m:
                        made.append(m)
            elif op.kind == "init" and tname:
                for cls, stmt, node in ops.init_sites(tree, covered, name):
                    m = ops.apply_init(name, src, cls, stmt, node, fname, tname, covered)
                    if m:
                        made.append(m)
            elif op.kind == "loop" and fname == "train.py":
                facts["source"] = src
                for site in ops.loop_sites(tree, name, facts):
                    m = ops.apply_loop(name, src, site, fname, facts)
                    if m:
                        made.append(m)
            out += _spread(made, per_op)
    return out


def code_sites_for(tree, covered, fname):
    sites = ops.code_sites(tree, covered)
    if fname == "train.py":
        # The script's own code: its model's forward and its loss helper, not the loader.
        sites = [(fn, s) for fn, s in sites if fn.name not in ("load_model_code", "make_batch")]
    return sites


def build(subjects, per_op, jobs, sample=None, operators=None):
    """Originals and their mutants, with the oracle's verdicts. `sample`: only every k-th
    mutant (spread evenly over subjects and operators), for the quick check in `make test`;
    `operators`: only these operators' mutants."""
    origs = originals(subjects, jobs)
    tasks = []
    mutants = []
    made = []
    unparsable = []  # an operator's own bug: it wrote code Python cannot read
    for s in subjects:
        folder = origs[s.name]
        if not (folder / "oracle.json").exists():
            continue
        counts = {}
        for m in mutants_of(s, folder, per_op):
            if operators and m.operator not in operators:
                continue
            try:
                compile(m.source, m.file, "exec")
            except SyntaxError as e:
                unparsable.append(f"{s.name} {m.operator} ({m.site}): {e.msg}, line {e.lineno}")
                continue
            i = counts.get(m.operator, 0)
            counts[m.operator] = i + 1
            made.append((s, m, i))
    if sample:
        made = _spread(made, sample)
    base = {}  # subject -> (its meta, its files), read once
    for s, m, i in made:
        if s.name not in base:
            folder = origs[s.name]
            meta0 = json.loads((folder / "meta.json").read_text())
            names = [n for n in (meta0["target_file"], "train.py") if n]
            base[s.name] = (meta0, {n: (folder / n).read_text() for n in names})
        base_meta, originals_files = base[s.name]
        mfolder = CACHE / "mutants" / f"{s.name}__{m.operator}__{i}"
        files = {**originals_files, m.file: m.source}
        meta = {
            "subject": s.name,
            "package": s.package,
            "operator": m.operator,
            "category": m.category,
            "file": m.file,
            "lines": m.lines,
            "related": m.related,
            "site": m.site,
            "expect_error": m.expect_error,
            "third_party": m.file != "train.py",
            "target_file": base_meta["target_file"],
        }
        if _write(mfolder, files, meta) or not (mfolder / "oracle.json").exists():
            tasks.append(("oracle", mfolder))
        mutants.append(mfolder)
    print(f"  oracle: {len(tasks)} of {len(mutants)} mutants to run", file=sys.stderr)
    run_all(tasks, jobs)
    return origs, mutants, unparsable


# -- truth --------------------------------------------------------------------------------------


def truth(mfolder: Path, origs) -> dict:
    meta = json.loads((mfolder / "meta.json").read_text())
    try:
        res = json.loads((mfolder / "oracle.json").read_text())
    except (OSError, ValueError):
        return {"status": "broken", "why": "the oracle's run did not finish"}
    base = json.loads((origs[meta["subject"]] / "oracle.json").read_text())
    err = res.get("error")
    # Parameters that learn in the original and not in the mutant, and parameters only the
    # mutant has (a replacement layer) that do not learn.
    lost = sorted(n for n, s in res["params"].items() if s != "ok" and base["params"].get(n, "ok") == "ok")
    # Parameters that do not learn in the original either (a numerically stale weight under
    # a tiny layer scale, a bias a fitted derivative ignores): naming them too is not wrong.
    already = sorted(n for n, s in base["params"].items() if s != "ok")
    if err:
        want = ops.OPERATORS[meta["operator"]].error
        wants = (want,) if isinstance(want, str) else want or ()
        if err["type"] == "RuntimeError" and any(w in err["message"] for w in wants):
            return {"status": "valid", "params": lost, "error": err, "already": already}
        return {"status": "broken", "why": f"{err['type']}: {err['message'][:120]}"}
    if not lost:
        return {"status": "equivalent"}
    return {"status": "valid", "params": lost, "error": None, "already": already}


# -- gradsleuth -------------------------------------------------------------------------------------


def run_gradsleuth(folders, jobs):
    key = _gradsleuth_key()
    tasks = [("run", f) for f in folders if _stale(f, "run", key)]
    print(f"  gradsleuth run: {len(tasks)} of {len(folders)} to run", file=sys.stderr)
    for _, f in tasks:
        for n in ("capture.json", "report.json"):
            (f / n).unlink(missing_ok=True)
    run_all(tasks, jobs)
    for _, f in tasks:
        if (f / "capture.json").exists():
            # From the run's folder, as `gradsleuth run` would: the capture's paths are relative.
            p = subprocess.run(
                [str(GRADSLEUTH), "report", "--format", "json", "capture.json"],
                capture_output=True,
                text=True,
                cwd=f,
            )
            (f / "report.json").write_text(p.stdout)
        (f / "run.key").write_text(key)
    for f in folders:
        if _stale(f, "lint", key):
            p = subprocess.run(
                [str(GRADSLEUTH), "lint", "--isolated", "--format", "json", "."],
                capture_output=True,
                text=True,
                cwd=f,
            )
            (f / "lint.json").write_text(p.stdout)
            (f / "lint.key").write_text(key)


def _stale(folder: Path, what: str, key: str) -> bool:
    k = folder / f"{what}.key"
    return not k.exists() or k.read_text() != key or (folder / "key.txt").stat().st_mtime > k.stat().st_mtime


def _findings(path: Path):
    try:
        return json.loads(path.read_text())["findings"]
    except (OSError, ValueError, KeyError):
        return None


# -- scoring -----------------------------------------------------------------------------------------


def _at(finding, file, lines):
    locs = [finding.get("location")] + [r.get("location") for r in (finding.get("related") or [])[:3]]
    for loc in locs:
        if loc and Path(loc.get("file", "")).name == file and loc.get("line") in lines:
            return True
    return False


# Wrappers whose path gradsleuth names parameters through, as the wrapped model names them
# (PEFT's `PeftModel`: `base_model.model.layers.0...` is the base model's `layers.0...`); the
# oracle names them from the script's own object.
_WRAPPER_PATHS = ("base_model.model.",)


def _as_user_names(names) -> set:
    out = set()
    for n in names:
        for p in _WRAPPER_PATHS:
            if n.startswith(p):
                n = n[len(p) :]
                break
        out.add(n)
    return out


def score_run(meta, tru, findings):
    if findings is None:
        return {"flagged": False, "category": False, "params": False, "line": False, "right": False, "no_report": True}
    loud = [f for f in findings if f["severity"] in ("error", "warning")]
    same = [f for f in loud if f["category"] == meta["category"]]
    lines = set(meta["lines"]) | set(meta.get("related") or [])
    params_ok = True
    if not tru.get("error"):
        got = set()
        for f in same:
            got |= set(f.get("params") or [])
        want = _as_user_names(tru["params"])
        params_ok = bool(same) and want <= got <= want | _as_user_names(tru.get("already") or [])
    line_ok = any(_at(f, meta["file"], lines) for f in same)
    r = {
        "flagged": bool(loud),
        "category": bool(same),
        "params": params_ok,
        "line": line_ok,
    }
    r["right"] = r["category"] and r["params"] and r["line"]
    return r


def score_lint(meta, findings):
    if not findings:
        return {"right": False, "flagged": False}
    loud = [f for f in findings if f["severity"] in ("error", "warning")]
    lines = set(meta["lines"]) | set(meta.get("related") or [])
    same = [f for f in loud if f["category"] == meta["category"] and _at(f, meta["file"], lines)]
    return {"right": bool(same), "flagged": bool(loud)}


def evaluate(subjects, per_op=SITES_PER_OPERATOR, jobs=2, sample=None, quiet=False, operators=None):
    t0 = time.time()
    warm(subjects)
    origs, mutants, unparsable = build(subjects, per_op, jobs, sample, operators)
    broken_originals = []
    for s in subjects:
        try:
            err = json.loads((origs[s.name] / "oracle.json").read_text()).get("error")
        except (OSError, ValueError):
            err = {"type": "no result", "message": "the oracle's run did not finish"}
        if err:
            # An original must train: its mutants' truth is measured against it.
            broken_originals.append(s.name)
            print(f"  {s.name}: the original failed: {err['type']}: {err['message'][:200]}", file=sys.stderr)
    truths = {m: truth(m, origs) for m in mutants}
    valid = [m for m in mutants if truths[m]["status"] == "valid"]
    run_gradsleuth(list(origs.values()) + valid, jobs)
    rows = []
    for m in valid:
        meta = json.loads((m / "meta.json").read_text())
        rows.append(
            {
                "mutant": m.name,
                "subject": meta["subject"],
                "package": meta["package"],
                "operator": meta["operator"],
                "category": meta["category"],
                "third_party": meta["third_party"],
                "truth": truths[m],
                "lines": meta["lines"],
                "run": score_run(meta, truths[m], _findings(m / "report.json")),
                "lint": score_lint(meta, _findings(m / "lint.json")),
                "static": ops.OPERATORS[meta["operator"]].static,
            }
        )
    alarms = []
    for name, f in origs.items():
        for kind in ("report", "lint"):
            fs = _findings(f / f"{kind}.json") or []
            for x in fs:
                if x["severity"] in ("error", "warning"):
                    alarms.append({"subject": name, "by": kind, "finding": x})
    counts = {"equivalent": 0, "broken": 0, "valid": 0}
    # Dropped mutants per operator and why: an operator whose mutants mostly fail for reasons
    # of their own is not measuring its bug.
    dropped: dict = {}
    for m in mutants:
        counts[truths[m]["status"]] += 1
        if truths[m]["status"] != "valid":
            op = json.loads((m / "meta.json").read_text())["operator"]
            why = truths[m].get("why", "equivalent").split(":")[0]
            dropped.setdefault(op, {}).setdefault(why, 0)
            dropped[op][why] += 1
    return {
        "unparsable": unparsable,
        "dropped": dropped,
        "rows": rows,
        "alarms": alarms,
        "counts": counts,
        "originals": len(origs),
        "broken_originals": broken_originals,
        "packages": sorted({s.package for s in subjects}),
        "seconds": round(time.time() - t0),
    }
