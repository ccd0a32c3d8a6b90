"""Shared helpers: the installed `gradsleuth` command and a runner for it."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parent.parent
# The report contract, kept in the repository: every report a test reads is validated.
SCHEMA = json.loads((ROOT / "schema" / "report.schema.json").read_text())
BIN = Path(sys.executable).parent
GRADSLEUTH = str(BIN / "gradsleuth")
CASES = sorted(p.parent for p in (ROOT / "tests" / "cases").glob("*/train.py"))


def report_of(text: str) -> dict:
    """A report parsed from JSON text, validated against the schema."""
    report = json.loads(text)
    jsonschema.validate(report, SCHEMA)
    return report


def run_gradsleuth(*args, cwd=None, timeout=600, env=None, input=None):
    """Runs the installed command; returns CompletedProcess with text output."""
    full_env = dict(os.environ)
    full_env.pop("NO_COLOR", None)
    if env:
        full_env.update(env)
    return subprocess.run(
        [GRADSLEUTH, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        input=input,
    )


def run_json(script, *args, cwd, tmp_path, extra=()):
    """`gradsleuth run --format json` on a script; returns (process, report dict or None)."""
    out = Path(tmp_path) / "report.json"
    proc = run_gradsleuth("run", "--format", "json", "--out", out, *extra, script, *args, cwd=cwd)
    report = report_of(out.read_text()) if out.exists() else None
    return proc, report


@pytest.fixture
def write_script(tmp_path):
    def write(text: str, name: str = "train.py") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return write


def _run_case(case: Path):
    expected = json.loads((case / "expected.json").read_text())
    out = case / ".report.json"
    if out.exists():
        out.unlink()
    proc = run_gradsleuth("run", "--format", "json", "--out", out, *expected.get("args", []), "train.py", cwd=case)
    report = report_of(out.read_text()) if out.exists() else None
    if out.exists():
        out.unlink()
    return expected, proc, report


@pytest.fixture(scope="session")
def results():
    """Every corpus case under the real `gradsleuth run`, two at a time: case -> (expected,
    process, report)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(CASES, pool.map(_run_case, CASES)))


def code_in_fix(fix: str) -> list[str]:
    """The code a fix shows (`...` spans that are Python statements or expressions, not a bare
    name): what a user would paste."""
    spans = re.findall(r"`([^`]+)`", fix)
    return [s for s in spans if re.search(r"[=(\[]", s) and not s.startswith("--")]


def parses(code: str) -> bool:
    try:
        ast.parse(as_statement(code))
    except SyntaxError:
        return False
    return True


def as_statement(code: str) -> str:
    """A method fragment (`.detach()`) on a name, a block header (`with torch.no_grad():`) with
    a body: what the user pastes them into."""
    code = code.strip()
    if code.startswith("."):
        code = "x" + code
    if code.endswith(":"):
        code += "\n    pass"
    return code
