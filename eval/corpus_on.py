"""The case corpus under another interpreter: `python eval/corpus_on.py PYTHON [PYTHONPATH]`.

Runs every `tests/cases/<name>/train.py` with `PYTHON -m gradsleuth run` (gradsleuth taken from
PYTHONPATH, default this checkout's `python/` folder with its built `_core`), and checks each
report against the case's `expected.json` exactly as `tests/test_cases.py` does (category,
parameters, line; no extra warning or error). For an environment with another torch or Python:

    python3.11 -m venv /tmp/t212 && /tmp/t212/bin/pip install torch==2.12.1 numpy
    .venv/bin/python eval/corpus_on.py /tmp/t212/bin/python

The seed of `make compat` (issue 18): one cell, the corpus check only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_cases import compare  # noqa: E402


def run(python: str, pythonpath: str, case: Path, tmp: Path) -> tuple[str, bool, str]:
    expected = json.loads((case / "expected.json").read_text())
    out = tmp / f"{case.name}.json"
    env = dict(os.environ, PYTHONPATH=pythonpath)
    args = [python, "-m", "gradsleuth", "run", "--format", "json", "--out", str(out), *expected.get("args", [])]
    proc = subprocess.run([*args, "train.py"], cwd=case, capture_output=True, text=True, env=env, timeout=900)
    if not out.exists():
        return case.name, False, "no report: " + proc.stderr[-300:]
    report = json.loads(out.read_text())
    missing, extra = compare(expected, report)
    if missing:
        got = "; ".join(f"{f['code']} {f.get('params')}" for f in report["findings"])
        return case.name, False, f"missing {missing[0]['category']}: got {got[:300]}"
    if extra:
        return case.name, False, "extra: " + "; ".join(f"{f['code']} {f.get('params')}" for f in extra)[:300]
    return case.name, True, ""


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    python = sys.argv[1]
    pythonpath = sys.argv[2] if len(sys.argv) > 2 else str(ROOT / "python")
    cases = sorted(p.parent for p in (ROOT / "tests" / "cases").glob("*/train.py"))
    import tempfile

    with tempfile.TemporaryDirectory() as d, ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: run(python, pythonpath, c, Path(d)), cases))
    failed = [r for r in results if not r[1]]
    for name, _, why in failed:
        print(f"FAIL {name}: {why}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
