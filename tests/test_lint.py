"""`gradsleuth lint` on the case corpus: every statically visible bug is found at the line the
runtime reports, and no control is flagged."""

from __future__ import annotations

import json

from conftest import ROOT, run_gradsleuth

CASES = ROOT / "tests" / "cases"


def test_lint_agrees_with_the_runtime_on_static_bugs(tmp_path):
    proc = run_gradsleuth("lint", "--format", "json", CASES)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["command"] == "lint"
    found = {
        (f["location"]["file"].split("/cases/")[-1].split("/")[0], f["category"], f["location"]["line"])
        for f in report["findings"]
    }
    static = {
        ("unregistered_list_heads", "unregistered", 24),
        ("unregistered_tuple_stages", "unregistered", 19),
        ("non_leaf_double_temperature", "non_leaf_param", 12),
        ("non_leaf_scaled_pos_emb", "non_leaf_param", 11),
        ("buffer_param_prompt", "buffer_not_param", 12),
        ("buffer_requires_grad_gate", "buffer_not_param", 9),
        ("recreated_lazy_proj", "recreated_weights", 14),
        ("data_attr_residual", "data_attr", 13),
        ("data_attr_feature_norm", "data_attr", 26),
        ("loss_rewrap_item", "loss_rewrap", 9),
        ("zero_grad_accumulation", "zero_grad_order", 28),
        ("zero_grad_after_backward", "zero_grad_order", 16),
        ("grad_hook_zeroing", "grad_hook", 11),
    }
    missing = static - found
    assert not missing, missing
    flagged_controls = {c for c, _, _ in found if c.startswith("control_")}
    assert not flagged_controls, flagged_controls


def test_lint_survives_bad_files(tmp_path):
    (tmp_path / "ok.py").write_text("import torch\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\nx = 1\n")
    (tmp_path / "deep.py").write_text("x = " + "(" * 1000 + "1" + ")" * 1000 + "\n")
    (tmp_path / "loop").symlink_to(tmp_path)
    proc = run_gradsleuth("lint", "--format", "json", tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert "panicked" not in proc.stderr
    report = json.loads(proc.stdout)
    unchecked = {f["location"]["file"].rsplit("/", 1)[-1] for f in report["findings"] if f["code"] == "GS300"}
    assert {"broken.py", "latin1.py"} <= unchecked
