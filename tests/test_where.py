"""`gradsleuth where`: from a PyTorch name to ATen op, kernels, autograd formula and the gdb
breakpoints, read from the installed torch; and those breakpoints really stop gdb in the kernel."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from conftest import run_gradsleuth


def _where(*args, env=None, cache=None):
    extra = {"GRADSLEUTH_CACHE_DIR": str(cache)} if cache else {}
    return run_gradsleuth("where", *args, env={**extra, **(env or {})})


def test_relu_from_python_name_to_kernel_and_backward(tmp_path):
    proc = _where("torch.relu", "--format", "json", cache=tmp_path)
    assert proc.returncode == 0, proc.stderr
    a = json.loads(proc.stdout)
    assert a["op"] == "relu"
    (relu,) = [o for o in a["overloads"] if o["name"] == "relu"]
    assert relu["dispatch"]["CPU"] == "relu"
    assert relu["backward_node"] == "ReluBackward0"
    assert "threshold_backward(grad, result, 0)" in relu["derivatives"]["self"]
    demangled = [s["demangled"] for s in a["symbols"]]
    assert demangled[0] == "at::native::relu(at::Tensor const&)"  # the CPU kernel first
    assert any(d.startswith("torch::autograd::generated::ReluBackward0::apply") for d in demangled)
    assert "break _ZN2at6native4reluERKNS_6TensorE    # at::native::relu(at::Tensor const&)" in a["gdb"]
    assert a["line_level"] is False  # the wheel has symbols, no DWARF


def test_every_spelling_and_overloads(tmp_path):
    for q in ("Tensor.add_", "aten::addmm.out", "torch.nn.functional.conv2d", "F.conv2d"):
        proc = _where(q, "--format", "json", cache=tmp_path)
        assert proc.returncode == 0, (q, proc.stdout, proc.stderr)
    a = json.loads(_where("aten::addmm.out", "--format", "json", cache=tmp_path).stdout)
    assert [o["name"] for o in a["overloads"]] == ["addmm.out"]
    add = json.loads(_where("torch.add", "--format", "json", cache=tmp_path).stdout)
    assert {"add.Tensor", "add.Scalar", "add.out"} <= {o["name"] for o in add["overloads"]}


def test_python_wrappers_and_unknown_names(tmp_path):
    proc = _where("F.interpolate", cache=tmp_path)
    assert proc.returncode == 2
    assert "is Python:" in proc.stderr and "functional.py:" in proc.stderr
    proc = _where("torch.rleu", cache=tmp_path)
    assert proc.returncode == 2 and "closest ATen ops: relu" in proc.stderr


def test_bad_torch_folders_are_clear_errors(tmp_path):
    fake = tmp_path / "torch"
    (fake / "lib").mkdir(parents=True)
    proc = _where("torch.relu", "--torch", fake, cache=tmp_path)
    assert proc.returncode == 2 and "cannot read" in proc.stderr and "Traceback" not in proc.stderr
    proc = _where("torch.relu", "--torch", tmp_path / "nope", cache=tmp_path)
    assert proc.returncode == 2 and "not a torch package folder" in proc.stderr


def test_the_breakpoints_stop_gdb_in_the_kernel(tmp_path):
    """gdb in batch mode, with the lines `where torch.relu` prints, on a real torch.relu call."""
    gdb = shutil.which("gdb")
    assert gdb, "gdb is part of this machine kind"
    a = json.loads(_where("torch.relu", "--format", "json", cache=tmp_path).stdout)
    script = tmp_path / "relu.gdb"
    lines = [line.split("    #")[0] for line in a["gdb"] if not line.startswith("#")]
    script.write_text("\n".join([*lines, "run", "bt 6", "kill", "quit"]) + "\n")
    proc = subprocess.run(
        [
            gdb,
            "-batch",
            "-nx",
            "-x",
            str(script),
            "--args",
            sys.executable,
            "-c",
            "import torch; torch.relu(torch.randn(3))",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert "hit Breakpoint" in out and "in at::native::relu(at::Tensor const&)" in out, out[-3000:]
    assert "#1 " in out  # and printed the backtrace
