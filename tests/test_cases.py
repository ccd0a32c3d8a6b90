"""The case corpus: tests/cases/<name>/train.py with expected.json.

Each buggy case must produce a finding of the expected category, naming exactly the expected
parameters, located at the expected line of train.py (and, where `says` lists phrases, each of
them in its message or fix); nothing else at warning or error level.
Controls (`"control": true`) must produce no warning and no error. Cases run under the real
`gradsleuth run`, two at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CASES, code_in_fix, parses


def _matches(finding, want):
    if finding["category"] != want["category"]:
        return False
    if "params" in want and sorted(finding.get("params", [])) != sorted(want["params"]):
        return False
    if "severity" in want and finding["severity"] != want["severity"]:
        return False
    if "says" in want and any(s not in finding["message"] + " " + (finding.get("fix") or "") for s in want["says"]):
        return False
    if "line" in want:
        loc = finding.get("location") or {}
        if loc.get("line") != want["line"] or Path(loc.get("file", "")).name != want.get("file", "train.py"):
            return False
    return True


def compare(expected: dict, report: dict) -> tuple[list, list]:
    """(expected findings the report lacks, findings at warning or error level no expectation
    names): both empty when the case holds."""
    unmatched = list(range(len(report["findings"])))
    missing = []
    for want in expected["findings"]:
        hit = next((i for i in unmatched if _matches(report["findings"][i], want)), None)
        if hit is None:
            missing.append(want)
        else:
            unmatched.remove(hit)
    extra = [report["findings"][i] for i in unmatched if report["findings"][i]["severity"] in ("error", "warning")]
    return missing, extra


def _describe(report):
    return json.dumps(report["findings"], indent=1)[:6000] if report else "no report"


def test_corpus_size():
    buggy = [c for c in CASES if not json.loads((c / "expected.json").read_text()).get("control")]
    controls = [c for c in CASES if json.loads((c / "expected.json").read_text()).get("control")]
    assert len(buggy) >= 20, len(buggy)
    assert len(controls) >= 10, len(controls)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case, results):
    expected, proc, report = results[case]
    assert report is not None, f"no report; stderr:\n{proc.stderr[-3000:]}"
    assert report["tool"] == "gradsleuth" and report["command"] == "run"
    assert report["steps_observed"] >= 1 or expected.get("no_steps"), proc.stderr[-2000:]
    missing, extra = compare(expected, report)
    assert not missing, f"expected {missing[0]}\ngot:\n{_describe(report)}\nstderr:\n{proc.stderr[-2000:]}"
    assert not extra, f"unexpected findings:\n{json.dumps(extra, indent=1)}"
    want_code = expected.get(
        "exit_code", 1 if any(w.get("severity", "error") == "error" for w in expected["findings"]) else 0
    )
    assert proc.returncode == want_code, f"exit {proc.returncode}, stderr:\n{proc.stderr[-3000:]}"
    for status in expected.get("statuses", {}).items():
        row = next((p for p in report["parameters"] if p["name"] == status[0]), None)
        assert row is not None and row["status"] == status[1], (status, row)


def test_every_fix_shown_on_the_corpus_is_python_that_parses(results):
    broken = []
    for case, (_, _, report) in results.items():
        for f in (report or {}).get("findings", []):
            for code in code_in_fix(f.get("fix") or ""):
                if not parses(code):
                    broken.append((case.name, f["code"], code))
    assert not broken, "\n".join(map(str, broken))
