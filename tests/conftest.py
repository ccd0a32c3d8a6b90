"""Shared helpers: the installed `gradsleuth` command and a runner for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
GRADSLEUTH = str(BIN / "gradsleuth")


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
    report = json.loads(out.read_text()) if out.exists() else None
    return proc, report


@pytest.fixture
def write_script(tmp_path):
    def write(text: str, name: str = "train.py") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return write
