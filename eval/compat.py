"""The version matrix (`make compat`): the wheel users install, on every torch and Python we support.

    python -m eval.compat                  # every cell
    python -m eval.compat --cells ci       # what CI runs: the oldest torch, and another Python (samples of the corpus)
    python -m eval.compat --cells torch2.8-py3.11,torch2.0-py3.11 --json matrix.json

Builds the wheel once (abi3, manylinux2014, linked with zig: what `pip install` takes on an old
distribution), makes one environment per cell with uv (kept between runs under
`~/.cache/gradsleuth-compat`, torch hard-linked from uv's cache), installs the wheel there and runs
each check with that environment's own `gradsleuth` command:

- install: `gradsleuth --version`, `gradsleuth.__version__` and the package metadata agree, and
  importing gradsleuth does not import torch;
- corpus: every `tests/cases/` case, held exactly as `tests/test_cases.py` holds it (category,
  parameters, line, no extra warning or error); a case whose script needs a newer torch says so
  in its `expected.json` (`"torch": ">=2.3"`, and `"torch_why"`: what an older one lacks) and
  counts as not applicable;
- same text: every finding's code, message and fix word for word as on the newest torch of the run;
- demo, watch (a NaN traced to its op and line), explain (tracebacks raised live by that torch),
  where (`torch.relu` found in that torch's own files), api (`diagnose` and `trace`);
- a cell below the supported range expects `gradsleuth run` to refuse with exit 2 and say why.

Prints the matrix (cell x check); exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_cases import compare  # noqa: E402
from test_explain import REAL  # noqa: E402

ENVS = Path(os.environ.get("GRADSLEUTH_COMPAT_DIR", Path.home() / ".cache" / "gradsleuth-compat"))
WHEELS = ROOT / ".cache" / "compat-wheel"
VENV_BIN = ROOT / ".venv" / "bin"


@dataclass(frozen=True)
class Cell:
    torch: str
    python: str
    numpy: str
    supported: bool = True
    extra: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"torch{'.'.join(self.torch.split('.')[:2])}-py{self.python}"


# torch before 2.3 compares versions with setuptools' pkg_resources when `packaging` is absent
# (`torch.optim` fails without either): a `python -m venv` of Python 3.11 has setuptools, uv's not.
OLD = ("setuptools==81.0.0",)
# torch 2.1 is the oldest the tracer supports (post-accumulate-grad hooks arrived in 2.1); 2.0
# is there to be refused. Python 3.10's newest torch is 2.14.1. numpy: 1.x below torch 2.3
# (built against it), the newest a Python has otherwise.
# transformers 4.x (its last line, 4.57), whose loader differs from 5.x: it gives the keys a
# checkpoint lacks storage through `load_state_dict` before initialising them.
HF4 = ("transformers==4.57.6", "tokenizers==0.22.2", "huggingface-hub==0.36.2", "safetensors==0.8.0")
# transformers 4.45 (before 4.51's loader): its low-memory loader writes the checkpoint through
# accelerate's `set_module_tensor_to_device`; an old torch with the transformers of its time.
HF445 = (
    "transformers==4.45.2", "tokenizers==0.20.3", "huggingface-hub==0.36.2", "safetensors==0.8.0", "accelerate==1.0.1",
)
CELLS = [
    Cell("2.15.0", "3.11", "2.4.6"),
    Cell("2.12.1", "3.11", "2.4.6"),
    Cell("2.8.0", "3.11", "2.4.6"),
    Cell("2.4.1", "3.11", "2.4.6"),
    Cell("2.1.2", "3.11", "1.26.4", extra=OLD + HF445),
    Cell("2.15.0", "3.13", "2.4.6", extra=HF4),
    Cell("2.15.0", "3.12", "2.4.6"),
    Cell("2.14.1", "3.10", "2.2.6"),
    Cell("2.0.1", "3.11", "1.26.4", supported=False, extra=OLD),
]
CI = ["torch2.15-py3.13", "torch2.1-py3.11"]
# CI runs a sample of the corpus, the same cases every run, each category in it (`make compat`
# runs it all): the newest torch runs the whole corpus in `make test` already, so its cell on
# another Python (where what changes is the interpreter's side: frames, bytecode, imports) takes
# up to 2 cases of each category; the oldest torch, where an op's recording differs, up to 4.
CI_SAMPLE = {"torch2.15-py3.13": 2, "torch2.1-py3.11": 4}
CHECKS = ["install", "corpus", "same text", "demo", "watch", "explain", "where", "api", "transformers 4"]


@dataclass
class Result:
    cell: Cell
    checks: dict[str, str] = field(default_factory=dict)  # check -> "ok", "n/a", "86/86" or "FAIL ..."
    answers: dict[str, list] = field(default_factory=dict)  # case -> findings' (code, message, fix)
    seconds: float = 0.0

    def failed(self) -> list[str]:
        return [f"{c}: {v}" for c, v in self.checks.items() if v.startswith("FAIL")]


def sh(cmd, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 900)
    return subprocess.run([str(c) for c in cmd], **kw)


def interpreter(version: str) -> str:
    """The interpreter for `version` (3.11): on PATH, else pyenv's."""
    for cand in [
        shutil.which(f"python{version}"),
        *sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}.*/bin/python"))),
    ]:
        if cand and sh([cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).stdout.strip() == version:
            return cand
    raise SystemExit(f"compat: no Python {version} on this machine (PATH or pyenv)")


def uv() -> str:
    found = shutil.which("uv", path=str(VENV_BIN)) or shutil.which("uv")
    if not found:
        raise SystemExit("compat: uv is not installed (make compat installs it from requirements-dev.txt)")
    return found


def build_wheel() -> Path:
    """The wheel users install: abi3, manylinux2014 (glibc 2.17), linked by zig."""
    shutil.rmtree(WHEELS, ignore_errors=True)
    env = dict(os.environ, PATH=f"{VENV_BIN}:{os.environ['PATH']}")
    proc = sh(
        [VENV_BIN / "maturin", "build", "--release", "--zig", "--compatibility", "manylinux2014", "-o", WHEELS],
        cwd=ROOT,
        env=env,
        timeout=3600,
    )
    wheels = list(WHEELS.glob("gradsleuth-*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        raise SystemExit(f"compat: the wheel did not build:\n{proc.stderr[-3000:]}")
    if "manylinux2014" not in wheels[0].name or "abi3" not in wheels[0].name:
        raise SystemExit(f"compat: the wheel is not abi3 manylinux2014: {wheels[0].name}")
    return wheels[0]


def environment(cell: Cell, wheel: Path) -> Path:
    """The cell's environment with its torch (made once, kept) and this wheel (every run)."""
    env = ENVS / cell.name
    spec = " ".join([f"torch=={cell.torch}", f"numpy=={cell.numpy}", *cell.extra])
    stamp = env / ".compat-spec"
    if not (stamp.exists() and stamp.read_text() == spec):
        shutil.rmtree(env, ignore_errors=True)
        for step in (
            [uv(), "venv", "-q", "-p", interpreter(cell.python), env],
            [uv(), "pip", "install", "-q", "-p", env / "bin" / "python", *spec.split()],
        ):
            proc = sh(step, timeout=3600)
            if proc.returncode != 0:
                raise RuntimeError(f"cannot install {spec} for Python {cell.python}: {proc.stderr[-600:]}")
        stamp.write_text(spec)
    proc = sh([uv(), "pip", "install", "-q", "--reinstall", "--no-deps", "-p", env / "bin" / "python", wheel])
    if proc.returncode != 0:
        raise RuntimeError(f"the wheel did not install: {proc.stderr[-600:]}")
    return env


# --- the checks: each returns "ok", "n/a", a count, or "FAIL why" -------------------------------


def check_install(env: Path, version: str) -> str:
    py, gs = env / "bin" / "python", env / "bin" / "gradsleuth"
    cli = sh([gs, "--version"]).stdout.strip()
    probe = sh(
        [
            py,
            "-c",
            "import sys, importlib.metadata as m, gradsleuth; "
            "print(gradsleuth.__version__, m.version('gradsleuth'), 'torch' in sys.modules)",
        ]
    )
    want = f"{version} {version} False"
    if cli != f"gradsleuth {version}" or probe.stdout.strip() != want:
        return f"FAIL --version {cli!r}, module/metadata/torch imported: {probe.stdout.strip() or probe.stderr[-200:]}"
    return "ok"


def _torch_at_least(torch: str, spec: str | None) -> bool:
    if not spec:
        return True
    want = tuple(int(x) for x in spec.removeprefix(">=").split("."))
    have = tuple(int(x) for x in re.findall(r"\d+", torch)[: len(want)])
    return have >= want


def _case(env: Path, torch: str, case: Path, out_dir: Path) -> tuple[str, str, list]:
    """(case, verdict, answers); verdict "" when the case holds, "n/a" when it needs a newer torch."""
    expected = json.loads((case / "expected.json").read_text())
    if not _torch_at_least(torch, expected.get("torch")):
        return case.name, "n/a", []
    out = out_dir / f"{case.name}.json"
    proc = sh(
        [env / "bin" / "gradsleuth", "run", "--format", "json", "--out", out, *expected.get("args", []), "train.py"],
        cwd=case,
    )
    if not out.exists():
        return case.name, "no report: " + proc.stderr[-300:], []
    report = json.loads(out.read_text())
    answers = sorted([f["code"], f["message"], f.get("fix", "")] for f in report["findings"])
    missing, extra = compare(expected, report)
    if missing:
        got = "; ".join(f"{f['code']} {f.get('params')}" for f in report["findings"])
        return case.name, f"missing {missing[0]['category']}: got {got[:300]}", answers
    if extra:
        return case.name, "extra: " + "; ".join(f"{f['code']} {f.get('params')}" for f in extra)[:300], answers
    return case.name, "", answers


def check_corpus(env: Path, result: Result, cases: list[Path], pool: ThreadPoolExecutor) -> str:
    torch = result.cell.torch
    with tempfile.TemporaryDirectory() as d:
        rows = list(pool.map(lambda c: _case(env, torch, c, Path(d)), cases))
    failed = [(n, v) for n, v, _ in rows if v not in ("", "n/a")]
    result.answers = {n: a for n, v, a in rows if v != "n/a"}
    ran = sum(1 for _, v, _ in rows if v != "n/a")
    for name, why in failed:
        print(f"  {result.cell.name} {name}: {why}", flush=True)
    return f"FAIL {ran - len(failed)}/{ran}" if failed else f"{ran}/{ran}"


def check_same_text(result: Result, reference: Result | None) -> str:
    if reference is None or reference is result or not reference.answers:
        return "n/a"
    differ = [n for n, a in result.answers.items() if n in reference.answers and a != reference.answers[n]]
    for name in differ:
        print(f"  {result.cell.name} {name} says otherwise than {reference.cell.name}:", flush=True)
        # Every finding one side has and the other lacks (a finding only one side has too).
        here, there = result.answers[name], reference.answers[name]
        for mine in (a for a in here if a not in there):
            print(f"    only here:  {mine}", flush=True)
        for theirs in (a for a in there if a not in here):
            print(f"    only there: {theirs}", flush=True)
    return f"FAIL {len(differ)} cases differ" if differ else "ok"


def check_demo(env: Path) -> str:
    proc = sh([env / "bin" / "gradsleuth", "demo"], cwd=tempfile.gettempdir())
    codes = ("GS101", "GS102", "GS103", "GS107")
    if proc.returncode != 0 or not all(c in proc.stdout for c in codes):
        return f"FAIL exit {proc.returncode}: {proc.stdout[-200:]}{proc.stderr[-300:]}"
    return "ok"


def check_watch(env: Path) -> str:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        proc = sh(
            [env / "bin" / "gradsleuth", "run", "--watch", "--format", "json", "--out", out, "prototype_nan.py"],
            cwd=ROOT / "tests" / "watch",
        )
        if not out.exists():
            return f"FAIL no report: {proc.stderr[-300:]}"
        nans = [f for f in json.loads(out.read_text())["findings"] if f["code"] == "GS140"]
    if len(nans) != 1 or nans[0]["location"]["line"] != 23 or nans[0]["steps"] != [25]:
        return f"FAIL {[(f['location'], f['steps']) for f in nans]}"
    return "ok"


def _explained(env: Path, signature: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "user_train.py"
        script.write_text(
            "import torch\n\n\ndef step():\n" + textwrap.indent(REAL[signature], "    ") + "\n\n\nstep()\n"
        )
        raised = sh([env / "bin" / "python", script], cwd=d)
        if raised.returncode == 0:
            return f"{signature}: did not raise"
        proc = sh([env / "bin" / "gradsleuth", "explain", "--format", "json", "-"], input=raised.stderr)
    try:
        findings = json.loads(proc.stdout)["findings"]
    except (ValueError, KeyError):
        return f"{signature}: exit {proc.returncode} {proc.stderr[-200:]}"
    hit = [f for f in findings if f["explanation"]["signature"] == signature]
    if not hit or not hit[0]["location"]["file"].endswith("user_train.py"):
        return f"{signature}: got {[f['explanation']['signature'] for f in findings]}"
    return ""


def check_explain(env: Path, pool: ThreadPoolExecutor) -> str:
    bad = [w for w in pool.map(lambda s: _explained(env, s), sorted(REAL)) if w]
    for why in bad:
        print(f"  explain {why}", flush=True)
    return f"FAIL {len(REAL) - len(bad)}/{len(REAL)}" if bad else f"{len(REAL)}/{len(REAL)}"


def check_where(env: Path) -> str:
    """`torch.relu` resolved in that torch's own files: op, CPU kernel, backward node, symbols."""
    proc = sh([env / "bin" / "gradsleuth", "where", "--format", "json", "torch.relu"])
    try:
        a = json.loads(proc.stdout)
        relu = next(o for o in a["overloads"] if o["name"] == "relu")
        symbols = [s["demangled"] for s in a["symbols"]]
        ok = relu["dispatch"]["CPU"] == "relu" and relu["backward_node"] == "ReluBackward0"
        ok = ok and any(s.startswith("at::native::relu(") for s in symbols)
    except (ValueError, KeyError, StopIteration):
        ok = False
    return "ok" if ok and proc.returncode == 0 else f"FAIL exit {proc.returncode}: {proc.stderr[-200:]}"


API = """
import torch, torch.nn as nn, torch.nn.functional as F, gradsleuth
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 6)
        self.heads = [nn.Linear(6, 3)]
    def forward(self, x):
        return self.heads[0](torch.relu(self.body(x)))
x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
net = Net()
r = gradsleuth.diagnose(net, (x, y), F.cross_entropy, torch.optim.SGD(net.parameters(), lr=0.1))
assert "unregistered" in {f["category"] for f in r.findings}, r
good = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 3))
opt = torch.optim.SGD(good.parameters(), lr=0.1)
with gradsleuth.trace(steps=2) as t:
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(good(x), y).backward()
        opt.step()
assert t.report().ok, t.report()
print("api ok")
"""


def check_api(env: Path) -> str:
    proc = sh([env / "bin" / "python", "-c", API], cwd=tempfile.gettempdir())
    return "ok" if proc.returncode == 0 and "api ok" in proc.stdout else f"FAIL {proc.stderr[-400:]}"


def check_transformers4(env: Path, cell: Cell) -> str:
    """A new classifier head frozen by a name filter, on transformers 4.x (`tests/frameworks`):
    the head is told as not loaded with the checkpoint, at the user's line, on that loader too,
    and on its low-memory loader (before 4.51 a different path: accelerate's
    `set_module_tensor_to_device`); a checkpoint that holds the head: deliberate freezing only."""
    if not any(x.startswith("transformers==4.") for x in cell.extra):
        return "n/a"
    head = [("GS101", ["classifier.bias", "classifier.weight"], 19)]
    for args, want in [((), head), (("--low-mem",), head), (("--full",), []), (("--full", "--low-mem"), [])]:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "r.json"
            script = "bert_classifier_frozen_by_filter.py"
            proc = sh(
                [env / "bin" / "gradsleuth", "run", "--format", "json", "--out", out, script, *args],
                cwd=ROOT / "tests" / "frameworks",
            )
            if not out.exists():
                return f"FAIL {args} no report: {proc.stderr[-300:]}"
            loud = [f for f in json.loads(out.read_text())["findings"] if f["severity"] != "info"]
        got = [(f["code"], sorted(f["params"]), f["location"]["line"]) for f in loud]
        if got != want:
            return f"FAIL {args} {got}"
    return "ok"


def check_refused(env: Path) -> dict[str, str]:
    """Below the supported range: `run` exits 2 and says which torch it needs; lint still works."""
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "train.py"
        script.write_text("import torch\nw = torch.nn.Parameter(torch.ones(2))\n(w * 2).sum().backward()\n")
        proc = sh([env / "bin" / "gradsleuth", "run", script], cwd=d)
        lint = sh([env / "bin" / "gradsleuth", "lint", script], cwd=d)
    said = proc.stderr + proc.stdout
    refused = proc.returncode == 2 and "torch 2.1" in said and "Traceback" not in said
    out = dict.fromkeys(CHECKS, "n/a")
    out["install"] = "ok" if lint.returncode in (0, 1) else f"FAIL lint exit {lint.returncode}"
    out["corpus"] = "refused" if refused else f"FAIL exit {proc.returncode}: {said[-300:]}"
    return out


def run_cell(cell: Cell, wheel: Path, version: str, cases: list[Path], reference: Result | None) -> Result:
    result = Result(cell)
    start = time.time()
    try:
        env = environment(cell, wheel)
    except RuntimeError as e:
        result.checks = {c: f"FAIL {e}" if c == "install" else "n/a" for c in CHECKS}
        return result
    if not cell.supported:
        result.checks = check_refused(env)
    else:
        with ThreadPoolExecutor(2) as pool:
            result.checks["install"] = check_install(env, version)
            result.checks["corpus"] = check_corpus(env, result, cases, pool)
            result.checks["same text"] = check_same_text(result, reference)
            result.checks["demo"] = check_demo(env)
            result.checks["watch"] = check_watch(env)
            result.checks["explain"] = check_explain(env, pool)
            result.checks["where"] = check_where(env)
            result.checks["api"] = check_api(env)
            result.checks["transformers 4"] = check_transformers4(env, cell)
    result.seconds = time.time() - start
    return result


def table(results: list[Result]) -> str:
    heads = ["cell", *CHECKS, "s"]

    def short(v: str) -> str:
        v = v.splitlines()[0] if v else v
        return v if len(v) <= 24 else v[:23] + "…"

    rows = [[r.cell.name, *(short(r.checks.get(c, "n/a")) for c in CHECKS), f"{r.seconds:.0f}"] for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(heads), line(["-" * w for w in widths]), *map(line, rows)])


def sample(cases: list[Path], per_category: int) -> list[Path]:
    """Up to `per_category` cases of each category (a case's first expected finding, or none),
    the first by name: the same cases on every run."""
    taken: dict[str, int] = {}
    out = []
    for case in cases:
        findings = json.loads((case / "expected.json").read_text()).get("findings") or [{}]
        category = findings[0].get("category", "")
        if taken.get(category, 0) < per_category:
            taken[category] = taken.get(category, 0) + 1
            out.append(case)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.compat", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--cells", help="comma-separated cell names, or `ci`; default every cell: " + ", ".join(c.name for c in CELLS)
    )
    ap.add_argument("--cases", help="only the corpus cases whose name contains this")
    ap.add_argument("--json", help="also write the matrix here")
    args = ap.parse_args()
    names = CI if args.cells == "ci" else (args.cells.split(",") if args.cells else [c.name for c in CELLS])
    by_name = {c.name: c for c in CELLS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        print(f"compat: unknown cell {unknown[0]!r}; cells: {', '.join(by_name)}", file=sys.stderr)
        return 2
    cells = [by_name[n] for n in names]
    cases = sorted(p.parent for p in (ROOT / "tests" / "cases").glob("*/train.py"))
    if args.cases:
        cases = [c for c in cases if args.cases in c.name]
    samples = CI_SAMPLE if args.cells == "ci" else {}
    wheel = build_wheel()
    version = wheel.name.split("-")[1]
    print(f"wheel: {wheel.name}", flush=True)

    # The newest torch of the run is the reference for "same text": run it first.
    def newest(c):
        return tuple(int(x) for x in c.torch.split("."))

    top = max((newest(x) for x in cells if x.supported), default=None)
    cells.sort(key=lambda c: (not c.supported, newest(c) != top, names.index(c.name)))
    results: list[Result] = []
    for cell in cells:
        print(f"{cell.name}: ...", flush=True)
        mine = sample(cases, samples[cell.name]) if cell.name in samples else cases
        if len(mine) < len(cases):
            print(f"  {cell.name}: {len(mine)} of the {len(cases)} cases, up to {samples[cell.name]} per category")
        results.append(run_cell(cell, wheel, version, mine, results[0] if results else None))
        for check, verdict in results[-1].checks.items():
            if verdict.startswith("FAIL"):
                print(f"  {cell.name} {check}: {verdict}", flush=True)
        print(f"{cell.name}: done in {results[-1].seconds:.0f} s", flush=True)
    print()
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps([{"cell": r.cell.name, **r.checks} for r in results], indent=1))
    failed = [(r.cell.name, f) for r in results for f in r.failed()]
    print(f"\n{len(results) - len({n for n, _ in failed})} cells passed, {len({n for n, _ in failed})} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
