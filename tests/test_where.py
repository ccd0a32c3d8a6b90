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


def test_doctor_on_this_machine():
    """This machine's torch is a CUDA wheel without DWARF, built with GCC 13 (ELF .comment)."""
    proc = run_gradsleuth("doctor", "--format", "json")
    report = json.loads(proc.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert "a wheel in site-packages" in checks["torch"]["detail"]
    assert checks["libtorch_cpu.so"]["status"] == "warn"
    assert (
        "no DWARF" in checks["libtorch_cpu.so"]["detail"] and "REL_WITH_DEB_INFO=1" in checks["libtorch_cpu.so"]["fix"]
    )
    assert "built with GCC 13.3.1 (ELF .comment" in checks["compiler"]["detail"]
    assert checks["gdb"]["status"] == "pass"
    assert {"CUDA_LAUNCH_BLOCKING", "TORCH_SHOW_CPP_STACKTRACES", "PYTORCH_ALLOC_CONF"} <= set(checks)
    assert proc.returncode == 0


def test_doctor_with_a_broken_python(tmp_path):
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho \'{"python": "x", "torch_error": "ImportError: libcuda"}\'\n')
    fake.chmod(0o755)
    proc = run_gradsleuth("doctor", "--python", fake)
    assert proc.returncode == 1 and "cannot import torch: ImportError: libcuda" in proc.stdout


LAUNCH = """{
    // keep: my own configuration
    "version": "0.2.0",
    "configurations": [
        {
            "name": "Train (mine)", // daily
            "type": "debugpy",
            "request": "launch",
            "program": "${workspaceFolder}/train.py",
            "args": ["--epochs", "3"],
        },
    ],
}
"""


def _jsonc(text):
    import re

    from gradsleuth._core import cli_main  # noqa: F401 - the package is importable

    no_comments = re.sub(r"//[^\n\"]*$|/\*.*?\*/", "", text, flags=re.M | re.S)
    return json.loads(re.sub(r",(\s*[}\]])", r"\1", no_comments))


def test_vscode_merges_into_a_users_launch_json(tmp_path):
    vs = tmp_path / ".vscode"
    vs.mkdir()
    (vs / "launch.json").write_text(LAUNCH)
    dry = run_gradsleuth("vscode", "train.py", "--dry-run", "--workspace", tmp_path)
    assert dry.returncode == 0 and "+++ b/.vscode/launch.json" in dry.stdout
    assert (vs / "launch.json").read_text() == LAUNCH  # --dry-run wrote nothing
    proc = run_gradsleuth("vscode", "train.py", "--workspace", tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (vs / "launch.json").read_text()
    # Everything the user wrote is still there, byte for byte, comments included.
    for line in LAUNCH.splitlines()[:11]:
        assert line in text, line
    doc = _jsonc(text)
    names = [c["name"] for c in doc["configurations"]]
    assert names[0] == "Train (mine)" and doc["configurations"][0]["args"] == ["--epochs", "3"]
    assert "gradsleuth: debugpy train.py" in names and "gradsleuth: gdb attach (native)" in names
    debugpy = next(c for c in doc["configurations"] if c["name"] == "gradsleuth: debugpy train.py")
    assert debugpy["justMyCode"] is False and debugpy["subProcess"] is True
    assert doc["compounds"][0]["configurations"] == ["gradsleuth: debugpy train.py", "gradsleuth: gdb attach (native)"]
    cpp = _jsonc((vs / "c_cpp_properties.json").read_text())
    assert any(p.endswith("torch/include") for p in cpp["configurations"][0]["includePath"])
    assert "handle SIGUSR1 SIGUSR2 SIGPIPE nostop noprint pass" in (vs / "gradsleuth.gdb").read_text()
    # A second run changes nothing.
    run_gradsleuth("vscode", "train.py", "--workspace", tmp_path)
    assert (vs / "launch.json").read_text() == text


def test_vscode_refuses_a_malformed_launch_json(tmp_path):
    vs = tmp_path / ".vscode"
    vs.mkdir()
    (vs / "launch.json").write_text('{ "configurations": [ { "name": ')
    proc = run_gradsleuth("vscode", "--workspace", tmp_path)
    assert proc.returncode == 2 and "launch.json" in proc.stderr and "Traceback" not in proc.stderr
    assert (vs / "launch.json").read_text() == '{ "configurations": [ { "name": '


def test_a_call_expression_reports_the_ops_that_really_ran(tmp_path):
    proc = _where("torch.randn(4, 3, requires_grad=True) @ torch.randn(3, 2)", "--format", "json", cache=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ran = json.loads(proc.stdout)
    forward = [r["op"] for r in ran if r["phase"] == "forward"]
    backward = [r["op"] for r in ran if r["phase"] == "backward"]
    assert "mm" in forward and "matmul" not in forward  # dense matmul runs mm
    mm = next(r for r in ran if r["op"] == "mm")
    assert mm["answer"]["overloads"][0]["backward_node"] == "MmBackward0"
    assert "mm" in backward
    bad = _where("torch.nope(1)", cache=tmp_path)
    assert bad.returncode == 2 and "the call failed" in bad.stderr and "AttributeError" in bad.stderr
