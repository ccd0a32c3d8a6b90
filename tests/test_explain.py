"""`gradsleuth explain` on real errors: each CPU error here is raised by real torch code in a
subprocess, its traceback captured and explained as a user would paste it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import report_of, run_gradsleuth

REAL = {
    "backward_twice": "x = torch.randn(3, requires_grad=True)\ny = (x.exp() * 2).sum()\ny.backward()\ny.backward()",
    "inplace_saved": (
        "x = torch.randn(4, 8, requires_grad=True)\ny = torch.sigmoid(x)\nz = y * 2\ny.mul_(3)\nz.sum().backward()"
    ),
    "inplace_leaf": "w = torch.nn.Parameter(torch.randn(3))\nw.mul_(2)",
    "no_grad_fn": "x = torch.randn(3, requires_grad=True)\nwith torch.no_grad():\n    y = (x * 2).sum()\ny.backward()",
    "scalar_outputs": "x = torch.randn(3, requires_grad=True)\n(x * 2).backward()",
    "numpy_requires_grad": "x = torch.randn(3, requires_grad=True)\n(x * 2).numpy()",
    "matmul_shapes": "torch.nn.Linear(4, 3)(torch.randn(2, 5))",
    "broadcast_size": "torch.randn(3, 4) + torch.randn(3, 5)",
    "dtype_mismatch": "torch.nn.Linear(4, 3)(torch.randn(2, 4, dtype=torch.float64))",
    "target_out_of_bounds": "torch.nn.functional.cross_entropy(torch.randn(2, 5), torch.tensor([1, 5]))",
    "index_out_of_range": "torch.nn.Embedding(10, 4)(torch.tensor([3, 12]))",
    "conv_channels": "torch.nn.Conv2d(3, 16, 3)(torch.randn(8, 32, 32, 3))",
    "conv_input_dims": "torch.nn.Conv2d(3, 16, 3)(torch.randn(8, 3, 32, 32, 1))",
    "view_stride": "torch.randn(4, 6).t().view(-1)",
    "ambiguous_bool": "x = torch.randn(3)\nif x > 0:\n    pass",
    "requires_grad_non_leaf": "x = torch.randn(3, requires_grad=True)\n(x * 2).requires_grad_(False)",
    "anomaly_nan": (
        "x = torch.tensor([0.0, 1.0], requires_grad=True)\nwith torch.autograd.detect_anomaly():\n"
        "    y = torch.sqrt(x) * 0\n    (y / y).sum().backward()"
    ),
}


def _traceback(snippet: str, tmp_path) -> str:
    script = tmp_path / "user_train.py"
    script.write_text("import torch\n\n\ndef step():\n" + textwrap.indent(snippet, "    ") + "\n\n\nstep()\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0, f"the snippet did not fail:\n{snippet}"
    return proc.stderr


@pytest.mark.parametrize("signature", sorted(REAL))
def test_real_cpu_errors_are_explained_at_the_users_frame(signature, tmp_path):
    log = _traceback(REAL[signature], tmp_path)
    proc = run_gradsleuth("explain", "--format", "json", "-", input=log)
    assert proc.returncode == 1, proc.stderr
    report = report_of(proc.stdout)
    assert report["command"] == "explain"
    sigs = [f["explanation"]["signature"] for f in report["findings"]]
    assert signature in sigs, (sigs, log[-600:])
    f = report["findings"][sigs.index(signature)]
    assert f["location"]["file"].endswith("user_train.py"), f["location"]
    e = f["explanation"]
    assert e["causes"] and e["checks"] and e["fixes"]
    assert "{" not in e["meaning"]


def test_text_output_reads_like_an_answer(tmp_path):
    log = _traceback(REAL["inplace_saved"], tmp_path)
    proc = run_gradsleuth("explain", "-", input=log)
    out = proc.stdout
    assert "error[GS402] inplace_saved" in out
    assert "likely causes:" in out and "fix:" in out and "check:" in out
    assert "version=1" in out and "expected_version=0" in out


def test_a_torchrun_log_with_rank_prefixes(tmp_path):
    log = tmp_path / "torchrun.log"
    log.write_text(
        "W1130 06:00:00.000000 123 torch/distributed/run.py:792] Setting OMP_NUM_THREADS to 1\n"
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/work/proj/train.py", line 88, in <module>\n'
        "[rank1]:     loss.backward()\n"
        "[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. "
        "This error indicates that your module has parameters that were not used in producing loss.\n"
        "[rank1]: Parameter indices which did not receive grad for rank 1: 4 5\n"
        "[rank0]: RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    )
    proc = run_gradsleuth("explain", "--format", "json", log)
    report = report_of(proc.stdout)
    by_sig = {f["explanation"]["signature"]: f for f in report["findings"]}
    assert by_sig["ddp_unused_parameters"]["ranks"] == [0, 1]
    assert by_sig["ddp_unused_parameters"]["location"]["line"] == 88
    assert by_sig["ddp_unused_indices"]["explanation"]["fields"]["indices"] == "4 5"
    assert "child_failed" in by_sig


def test_unrecognised_errors_exit_2_with_type_and_message(tmp_path):
    proc = run_gradsleuth(
        "explain", "-", input="Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'lr'\n"
    )
    assert proc.returncode == 2
    assert "not recognised: KeyError: 'lr'" in proc.stderr
    proc = run_gradsleuth("explain", "-", input="all good here\n")
    assert proc.returncode == 2 and "no error found" in proc.stderr


def test_garbage_and_binary_input_are_not_a_crash(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4000 + b"\nRuntimeError: CUDA error: device-side assert triggered\n")
    proc = run_gradsleuth("explain", junk)
    assert proc.returncode == 1
    assert "GS423" in proc.stdout
    missing = run_gradsleuth("explain", tmp_path / "nope.log")
    assert missing.returncode == 2 and missing.stderr.startswith("gradsleuth: error:")


def test_run_report_carries_the_explanation(write_script, tmp_path):
    script = write_script(
        "import torch\nlayer = torch.nn.Linear(4, 4)\ny = torch.sigmoid(layer(torch.randn(2, 4)))\nz = y * 2\n"
        "y.add_(1)\nz.sum().backward()\n"
    )
    proc = run_gradsleuth("run", "--format", "json", "--out", tmp_path / "r.json", script, cwd=tmp_path)
    assert proc.returncode == 1
    report = report_of((tmp_path / "r.json").read_text())
    err = report["error"]
    assert err["explanation"]["signature"] == "inplace_saved"
    assert err["explained_by"], "linked to the inplace_saved finding"
    f = next(f for f in report["findings"] if f["id"] == err["explained_by"][0])
    assert f["category"] == "inplace_saved" and f["location"]["line"] == 5
