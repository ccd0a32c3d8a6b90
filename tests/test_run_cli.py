"""`gradsleuth run` / `report` / `demo` as a user meets them: output, exit codes, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, report_of, run_gradsleuth, run_json

TRAIN = textwrap.dedent(
    """
    import sys
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 8)
            self.heads = [nn.Linear(8, 2), nn.Linear(8, 2)]

        def forward(self, x):
            h = torch.relu(self.body(x))
            return sum(head(h) for head in self.heads)

    print("args:", sys.argv[1:])
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
        opt.zero_grad()
        loss = model(torch.randn(3, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        print("step", step, flush=True)
    print("finished")
    """
)


def test_report_follows_the_scripts_own_output(write_script, tmp_path):
    script = write_script(TRAIN)
    proc = run_gradsleuth("run", script, "4", "--flag", cwd=tmp_path)
    out = proc.stdout
    assert "args: ['4', '--flag']" in out
    assert out.index("finished") < out.index("gradsleuth run: 1 error")
    assert "error[GS103] unregistered" in out
    assert "self.heads = [nn.Linear(8, 2), nn.Linear(8, 2)]" in out
    assert "nn.ModuleList([nn.Linear(8, 2), nn.Linear(8, 2)])" in out
    assert proc.returncode == 1


def test_json_report_is_valid_against_the_schema(write_script, tmp_path):
    script = write_script(TRAIN)
    proc, report = run_json(script, cwd=tmp_path, tmp_path=tmp_path)
    assert report is not None, proc.stderr
    assert report["steps_observed"] == 3
    assert report["target"]["script"].endswith("train.py")
    assert report["environment"]["torch_version"].startswith("2.")
    rows = {p["name"]: p for p in report["parameters"]}
    assert rows["body.weight"]["status"] == "learning"
    assert len(rows["body.weight"]["grad_norm"]) == 3
    assert all(u is not None and u > 0 for u in rows["body.weight"]["update_norm"])
    assert rows["heads.0.weight"]["status"] == "unregistered"
    assert rows["heads.0.weight"]["in_optimizer"] is False


def test_fail_on_controls_the_exit_code(write_script, tmp_path):
    script = write_script(TRAIN)
    assert run_gradsleuth("run", "--fail-on", "never", script, cwd=tmp_path).returncode == 0
    assert run_gradsleuth("run", "--fail-on", "warning", script, cwd=tmp_path).returncode == 1


def test_stop_after_ends_the_script_after_the_observed_steps(write_script, tmp_path):
    script = write_script(TRAIN)
    proc = run_gradsleuth("run", "--steps", "2", "--stop-after", script, "50", cwd=tmp_path)
    # It ends inside the second optimizer.step(), before the script prints "step 1".
    # (Read line by line: the report's timing line can read "op-level step 13 ms".)
    printed = proc.stdout.splitlines()
    assert "step 0" in printed and "step 1" not in printed and "finished" not in printed
    assert "2 steps observed" in proc.stdout


def test_save_capture_then_report_without_python(write_script, tmp_path):
    script = write_script(TRAIN)
    cap = tmp_path / "cap.json"
    first = run_gradsleuth("run", "--save-capture", cap, "--format", "json", script, cwd=tmp_path)
    again = run_gradsleuth("report", cap, "--format", "json", cwd=tmp_path)
    assert again.returncode == 1
    a = report_of(first.stdout[first.stdout.index("{") :])
    b = report_of(again.stdout)
    assert a["findings"] == b["findings"] and a["parameters"] == b["parameters"]
    capture = json.loads(cap.read_text())
    assert capture["format"] == "gradsleuth-capture" and capture["version"] == 1
    assert "data" not in json.dumps(capture).lower().replace("dtype", "")  # identities and norms only
    # The Rust binary alone can re-render it (no Python involved).
    cli = ROOT / "target" / "release" / "gradsleuth-cli"
    if cli.exists():
        import subprocess

        p = subprocess.run([str(cli), "report", str(cap)], capture_output=True, text=True)
        assert "GS103" in p.stdout


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json at all",
        b"\xff\xfe\x00garbage",
        b'{"format": "gradsleuth-capture", "version": 7}',
        b"[1, 2, 3]",
        b'{"format": "gradsleuth-capture", "version": 1, "tensors": "oops"}',
    ],
)
def test_garbage_capture_is_a_clear_error(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    proc = run_gradsleuth("report", bad)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gradsleuth: error:")
    assert "Traceback" not in proc.stderr and "panicked" not in proc.stderr


def test_missing_script(tmp_path):
    proc = run_gradsleuth("run", tmp_path / "nope.py")
    assert proc.returncode == 2
    assert "no such script" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_syntax_error_is_shown_as_python_shows_it(write_script, tmp_path):
    script = write_script("import torch\n\ndef broken(:\n    pass\n")
    proc = run_gradsleuth("run", script, cwd=tmp_path)
    assert proc.returncode == 1
    assert 'File "' in proc.stderr and "line 3" in proc.stderr and "SyntaxError" in proc.stderr
    assert "gradsleuth/" not in proc.stderr
    assert "the script raised SyntaxError" in proc.stdout


def test_a_script_that_raises_keeps_its_traceback_and_its_exit_code(write_script, tmp_path):
    script = write_script(
        textwrap.dedent(
            """
            import torch
            import torch.nn as nn

            model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
            opt = torch.optim.Adam(model.parameters())
            for step in range(3):
                loss = model(torch.randn(2, 4)).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step == 1:
                    raise ValueError("bad batch at step 1")
            """
        )
    )
    proc = run_gradsleuth("run", "--format", "json", "--out", tmp_path / "r.json", script, cwd=tmp_path)
    assert proc.returncode == 1
    err = proc.stderr
    assert err.startswith("Traceback (most recent call last):")
    assert "line 13, in <module>" in err and "ValueError: bad batch at step 1" in err
    assert "gradsleuth" not in err and "runpy" not in err
    report = report_of((tmp_path / "r.json").read_text())
    assert report["error"]["type"] == "ValueError"
    assert report["steps_observed"] == 2


def test_a_script_the_timeout_stops_is_reported_with_its_steps_and_where_it_hung(write_script, tmp_path):
    """`--timeout` on a script stuck after two steps (a DataLoader worker running beside it):
    the steps it took are diagnosed, the error says where it was stuck, and the worker ends
    quietly (it inherited the script's SIGTERM handling)."""
    script = write_script(
        textwrap.dedent(
            """
            import time
            import torch
            import torch.nn as nn
            from torch.utils.data import DataLoader, TensorDataset

            model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
            opt = torch.optim.Adam(model.parameters())
            loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=2, num_workers=1)
            for step, (x,) in enumerate(loader):
                loss = model(x).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step == 1:
                    time.sleep(3600)  # a read that never returns
            """
        )
    )
    out = tmp_path / "r.json"
    proc = run_gradsleuth("run", "--timeout", "20", "--format", "json", "--out", out, script, cwd=tmp_path)
    assert proc.returncode == 124
    report = report_of(out.read_text())
    assert report["steps_observed"] == 2
    assert report["error"]["type"] == "Timeout"
    message = report["error"]["message"]
    assert "after the optimizer step of step 2" in message and "train.py:16 `time.sleep(3600)" in message, message
    assert not [f for f in report["findings"] if f["severity"] != "info"], report["findings"]
    assert "Traceback" not in proc.stderr, proc.stderr


def test_sys_exit_code_is_passed_through(write_script, tmp_path):
    script = write_script("import sys\nimport torch\nsys.exit(7)\n")
    proc = run_gradsleuth("run", script, cwd=tmp_path)
    assert proc.returncode == 7


def test_a_script_that_never_calls_backward(write_script, tmp_path):
    script = write_script("import torch\nm = torch.nn.Linear(2, 2)\nprint(m(torch.ones(1, 2)).sum().item())\n")
    proc = run_gradsleuth("run", script, cwd=tmp_path)
    assert proc.returncode == 0
    assert "Nothing to diagnose" in proc.stdout and "backward() was never called" in proc.stdout


def test_module_mode_and_relative_imports(tmp_path):
    pkg = tmp_path / "proj"
    (pkg / "trainer").mkdir(parents=True)
    (pkg / "trainer" / "__init__.py").write_text("")
    (pkg / "trainer" / "models.py").write_text(
        "import torch.nn as nn\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a = nn.Linear(3, 3)\n        self.unused = nn.Linear(3, 3)\n\n    def forward(self, x):\n"
        "        return self.a(x)\n"
    )
    (pkg / "trainer" / "__main__.py").write_text(
        "import torch\nfrom .models import Net\n\nm = Net()\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n    o.zero_grad()\n    m(torch.randn(2, 3)).sum().backward()\n    o.step()\n"
    )
    proc = run_gradsleuth("run", "--format", "json", "-m", "trainer", cwd=pkg)
    report = report_of(proc.stdout)
    unused = [f for f in report["findings"] if f["category"] == "unused"]
    assert unused and unused[0]["params"] == ["unused.weight", "unused.bias"]
    assert unused[0]["location"]["file"] == "trainer/models.py" and unused[0]["location"]["line"] == 7


def test_script_directory_is_on_sys_path(tmp_path):
    (tmp_path / "helpers.py").write_text("def lr():\n    return 0.1\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom helpers import lr\nm = torch.nn.Linear(2, 1)\n"
        "o = torch.optim.SGD(m.parameters(), lr=lr())\n"
        "for _ in range(3):\n    o.zero_grad()\n    m(torch.ones(1, 2)).sum().backward()\n    o.step()\n"
    )
    elsewhere = tmp_path / "sub"
    elsewhere.mkdir()
    proc = run_gradsleuth("run", "../train.py", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert "no problems found" in proc.stdout


def test_demo_shows_its_bugs():
    proc = run_gradsleuth("demo")
    assert proc.returncode == 0
    for code in ("GS102", "GS103", "GS107", "GS101"):
        assert code in proc.stdout
    assert "epoch 1" in proc.stdout


def test_python_dash_m_gradsleuth_is_the_same_command(tmp_path):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "gradsleuth", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("gradsleuth ")


def test_the_version_is_one_everywhere():
    """`gradsleuth --version`, `gradsleuth.__version__` and the installed package's metadata."""
    from importlib.metadata import version

    import gradsleuth

    proc = run_gradsleuth("--version")
    assert proc.stdout.strip() == f"gradsleuth {gradsleuth.__version__}" == f"gradsleuth {version('gradsleuth')}"


@pytest.mark.parametrize("how", ["script", "launched"])
def test_a_torch_older_than_supported_is_refused_before_the_script_runs(how, write_script, tmp_path):
    """Below torch 2.1 the tracer cannot see which parameters a backward reached: `run` says so
    and exits 2 instead of reporting every parameter unreached (a torch that says it is 2.0.1)."""
    fake = tmp_path / "old" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "2.0.1"\n')
    marker = tmp_path / "ran"
    script = write_script(f"import torch\nopen({str(marker)!r}, 'w').close()\n")
    command = [script] if how == "script" else ["--", "python", script]
    env = {"PYTHONPATH": str(fake.parent), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = run_gradsleuth("run", *command, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = proc.stderr
    assert "needs torch 2.1 or newer" in said and "torch 2.0.1" in said and "Traceback" not in said, said
    assert said.count("needs torch 2.1") == 1, said
    # A plain run never starts the script; a launched job ran untraced, as it would without us.
    assert marker.exists() == (how == "launched")
    assert "GS100" not in proc.stdout, proc.stdout


def test_commands_that_need_no_torch_do_not_import_it(tmp_path):
    cap = Path(tmp_path) / "c.json"
    cap.write_text('{"format": "gradsleuth-capture", "version": 1, "tool_version": "0", "command": "run"}')
    import subprocess

    code = (
        "import sys\nfrom gradsleuth._core import cli_main\nrc = cli_main(['gradsleuth', 'report', sys.argv[1]])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\nprint('rc', rc)\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(cap)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "rc 0" in p.stdout


def test_the_bootstrap_refuses_a_run_configuration_it_cannot_read(write_script, tmp_path):
    """`gradsleuth run` hands the child one typed file; a broken or foreign one is a clear
    error and exit 2, never a traceback from gradsleuth."""
    script = write_script("print('ran')\n")
    bad = tmp_path / "bad.config"
    for text, says in [("{not json", "run configuration"), ('{"version": 99}', "version 99")]:
        bad.write_text(text)
        proc = subprocess.run(
            [sys.executable, "-m", "gradsleuth._run", str(script)],
            capture_output=True,
            text=True,
            env={**os.environ, "GRADSLEUTH_RUN_CONFIG": str(bad)},
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert "gradsleuth: error:" in proc.stderr and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and "ran" not in proc.stdout


WARNS = """
import warnings
import torch, torch.nn as nn, torch.nn.functional as F

model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    h = model[0](torch.randn(8, 4))
    copy = torch.tensor(h)
    d = F.dropout2d(h, 0.1)
    loss = model[2](F.relu(h)).pow(2).mean() + d.mean() * 0
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _warning_lines(stderr: str) -> list[str]:
    return sorted({line for line in stderr.splitlines() if "Warning: " in line and line.startswith("/")})


@pytest.mark.parametrize("mode", [[], ["--deep"]])
def test_warnings_raised_inside_ops_keep_the_users_line(mode, write_script, tmp_path):
    """One warning from C++ (`torch.tensor(tensor)`), one from Python with a stack level
    (`F.dropout2d` on a 2-D input): the same file and line as the plain run, and `-W error`
    still turns the first into the script's exception."""
    script = write_script(WARNS)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    want = _warning_lines(plain.stderr)
    assert [w.split(": ")[0].rsplit(":", 1)[1] for w in want] == ["10", "9"], want
    proc = run_gradsleuth("run", *mode, script, cwd=tmp_path)
    assert _warning_lines(proc.stderr) == want, proc.stderr[-3000:]
    strict = run_gradsleuth("run", *mode, script, cwd=tmp_path, env={"PYTHONWARNINGS": "error"})
    assert strict.returncode == 1
    assert "the script raised UserWarning: To copy construct" in strict.stdout + strict.stderr


def test_the_report_says_what_observing_cost(write_script, tmp_path):
    script = write_script(WARNS)
    proc, report = run_json(script, cwd=tmp_path, tmp_path=tmp_path)
    cost = report["observation"]
    assert (cost["op_level_steps"], cost["cheap_steps"]) == (1, 2), cost
    assert cost["op_level_seconds"] > 0 and cost["cheap_step_seconds"] > 0
    text = run_gradsleuth("run", "--deep", script, cwd=tmp_path).stdout
    assert "observation: 3 op-level steps, " in text, text


COUNTED = """
import collections
import torch, torch.nn as nn
from torch.overrides import TorchFunctionMode

class Counter(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.ops[getattr(func, "__name__", str(func))] += 1
        return func(*args, **(kwargs or {}))

model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    with Counter() as counter:
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("ops", step, sorted(counter.ops.items()))
"""


_WHOLE_STEP = """    with Counter() as counter:
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


@pytest.mark.parametrize("mode", [[], ["--deep"], ["--watch"]])
@pytest.mark.parametrize(
    "body",
    [
        _WHOLE_STEP,
        # the mode entered after the forward; the backward called through the mode's handler,
        # or as a function while the mode is on the stack: the watch of gradient writes after
        # backward must keep out of the way of both
        _WHOLE_STEP.replace("    with Counter() as counter:\n        loss", "    loss")
        .replace("        opt.zero_grad()\n", "    opt.zero_grad()\n    with Counter() as counter:\n"),
        _WHOLE_STEP.replace("    with Counter() as counter:\n        loss", "    loss")
        .replace("        opt.zero_grad()\n", "    opt.zero_grad()\n    with Counter() as counter:\n")
        .replace("loss.backward()", "torch.autograd.backward(loss)"),
    ],
    ids=["whole-step", "backward-and-step", "autograd-backward-and-step"],
)
def test_a_users_function_mode_sees_only_the_users_ops(mode, body, write_script, tmp_path):
    """An op counter (a TorchFunctionMode of the user's, like FLOP counters and
    `torch.device(...)`) around the whole step or a part of it counts the same ops under
    gradsleuth as without it: the model scan, the norms around the step, the graph walk and
    the gradient watch after backward are not seen."""
    text = COUNTED.replace(_WHOLE_STEP, body)
    script = write_script(text)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    want = [line for line in plain.stdout.splitlines() if line.startswith("ops")]
    assert len(want) == 4, plain.stdout + plain.stderr
    proc = run_gradsleuth("run", *mode, script, cwd=tmp_path)
    got = [line for line in proc.stdout.splitlines() if line.startswith("ops")]
    assert got == want, proc.stdout[-3000:] + proc.stderr[-3000:]


STEP_WITH_MODES = COUNTED.replace(
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)",
    """class Odd(torch.optim.SGD):
    # A step that counts its own ops with a mode it enters, then runs the model (no closure).
    def step(self, closure=None):
        with Counter() as inner:
            r = super().step()
        with torch.no_grad():
            model(torch.randn(2, 4))
        print("step ops", sorted(inner.ops.items()))
        return r

opt = Odd(model.parameters(), lr=0.1)""",
).replace("model = nn.Sequential(", "torch.manual_seed(0)\nmodel = nn.Sequential(").replace(
    '    print("ops", step, sorted(counter.ops.items()))',
    '    print("ops", step, sorted(counter.ops.items()), torch._C._len_torch_function_stack())',
)


def test_modes_inside_an_optimizer_step(write_script, tmp_path):
    """During the op-level step gradsleuth's mode is off the stack while an optimizer steps
    without a closure: a mode the step enters and a forward it runs see what they see without
    gradsleuth, the mode stack after each step is as deep, and the weights end the same."""
    script = write_script(STEP_WITH_MODES + "print('w', model[0].weight.sum().item())\n")
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    want = [ln for ln in plain.stdout.splitlines() if ln.startswith(("ops", "step ops", "w "))]
    assert len(want) == 9, plain.stdout + plain.stderr
    for mode in ([], ["--deep"]):
        proc = run_gradsleuth("run", *mode, script, cwd=tmp_path)
        got = [ln for ln in proc.stdout.splitlines() if ln.startswith(("ops", "step ops", "w "))]
        assert got == want, proc.stdout[-3000:] + proc.stderr[-3000:]
