"""Nothing gradsleuth attaches may change what a user does with their own objects.

`tests/objects/user_objects.py` trains three kinds of model (a plain MLP; one with buffers and
tied weights; a transformers BERT from a config, with its Adam state) and, inside the observed
window and after it, saves, loads, deep-copies, pickles, scripts, traces, exports and compiles
them, hands one to a spawned process, and checks a deleted model is freed. Under every mode
(`run`, `--deep`, `--watch`, and the API's `trace`, `watch`, `diagnose`) its output must be the
plain run's, line for line: the same saved bytes, the same copies training the same way, the
same errors where plain Python has them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import ROOT, report_of, run_gradsleuth

SCRIPT = ROOT / "tests" / "objects" / "user_objects.py"
CLI_MODES = {"run": [], "run --deep": ["--deep"], "run --watch": ["--watch"]}
API_MODES = ["trace", "watch", "watch_all", "diagnose"]


def _plain(mode: str = ""):
    env = dict(os.environ, GS_MODE=mode)
    return subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=SCRIPT.parent, capture_output=True, text=True, timeout=600, env=env
    )


def _cli(flags, tmp):
    out = tmp / f"report{len(flags)}{'w' if '--watch' in flags else ''}.json"
    proc = run_gradsleuth("run", "--format", "json", "--out", out, *flags, SCRIPT, cwd=SCRIPT.parent)
    return proc, (report_of(out.read_text()) if out.exists() else None)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("objects")
    with ThreadPoolExecutor(max_workers=2) as pool:
        plain = pool.submit(_plain)
        cli = {name: pool.submit(_cli, flags, tmp) for name, flags in CLI_MODES.items()}
        api = {name: pool.submit(_plain, name) for name in API_MODES}
        return plain.result(), {k: f.result() for k, f in cli.items()}, {k: f.result() for k, f in api.items()}


def _lines(proc) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.split(" ", 1)[0] in ("mlp", "tied", "bert")]


def test_the_plain_run_does_every_operation(outcomes):
    plain, _, _ = outcomes
    assert plain.returncode == 0, plain.stderr[-2000:]
    lines = _lines(plain)
    # 11 operations on the MLP (the spawned process too), 10 on the others, at two steps;
    # the final weights and whether the model was freed.
    assert len(lines) == 2 * 11 + 2 * 10 * 2 + 3 * 2, lines
    assert all(line.endswith("True") for line in lines if " freed " in line)


@pytest.mark.parametrize("mode", list(CLI_MODES))
def test_gradsleuth_run_leaves_every_operation_as_plain_python_does(outcomes, mode):
    plain, cli, _ = outcomes
    proc, report = cli[mode]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _lines(proc) == _lines(plain)
    assert report is not None and report.get("error") is None
    assert report["steps_observed"] >= 1


@pytest.mark.parametrize("mode", API_MODES)
def test_the_api_leaves_every_operation_as_plain_python_does(outcomes, mode):
    plain, _, api = outcomes
    proc = api[mode]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _lines(proc) == _lines(plain)


def test_a_compiled_model_is_one_info_line_however_often_it_is_compiled(outcomes):
    _, cli, _ = outcomes
    _, report = cli["run --watch"]
    compiled = [f for f in report["findings"] if f["code"] == "GS191"]
    assert len(compiled) == 1, compiled


PICKLING = {
    "hook": (
        """
import io
import torch, torch.nn as nn

def main():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acts = {}
    def keep(m, i, o):
        acts["last"] = o.detach()
    model[1].register_forward_hook(keep)
    for step in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    torch.save(model, io.BytesIO())

main()
""",
        "pickle_object",
        r"model\.1\._forward_hooks\[\d+\]",
    ),
    "handle": (
        """
import copy
import torch, torch.nn as nn

class Net(nn.Module):
    def __init__(self, log):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.log = log
    def forward(self, x):
        return self.lin(x)

model = Net(open(__file__))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad(); model(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
ema = copy.deepcopy(model)
""",
        "pickle_object",
        r"model\.log",
    ),
    "workers": (
        """
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

def main():
    ds = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = DataLoader(ds, batch_size=8, num_workers=1, multiprocessing_context="spawn",
                        collate_fn=lambda b: torch.utils.data.default_collate(b))
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad(); nn.functional.mse_loss(model(x), y).backward(); opt.step()

if __name__ == "__main__":
    main()
""",
        "pickle_worker",
        r"loader\.collate_fn",
    ),
    "process": (
        """
import torch, torch.nn as nn
import torch.multiprocessing as mp

def main():
    model = nn.Linear(4, 2)
    def train(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        opt.zero_grad(); m(torch.randn(8, 4)).sum().backward(); opt.step()
    p = mp.get_context("spawn").Process(target=train, args=(model,))
    p.start()
    p.join()

if __name__ == "__main__":
    main()
""",
        "pickle_process",
        r"p\._target",
    ),
}


@pytest.mark.parametrize("shape", list(PICKLING))
def test_a_pickling_error_is_explained_by_its_caller_and_names_who_holds_the_object(shape, tmp_path):
    import re

    text, signature, holder = PICKLING[shape]
    script = tmp_path / "train.py"
    script.write_text(text)
    out = tmp_path / "report.json"
    proc = run_gradsleuth("run", "--format", "json", "--out", out, script, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    error = report_of(out.read_text())["error"]
    assert error["explanation"]["signature"] == signature, error
    assert re.fullmatch(holder, error["explanation"]["fields"]["holder"]), error["explanation"]["fields"]
    assert error["explanation"]["causes"][0].startswith("It is reached through `")


HOGWILD = """
import torch, torch.nn as nn, torch.nn.functional as F
import torch.multiprocessing as mp


def train(rank, model):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(torch.randn(8, 10)), torch.randint(0, 3, (8,))).backward()
        opt.step()


if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    model.share_memory()
    processes = [mp.Process(target=train, args=(rank, model)) for rank in range(2)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
"""


def test_training_in_processes_the_script_starts_is_said_plainly_at_their_start(tmp_path):
    script = tmp_path / "hogwild.py"
    script.write_text(HOGWILD)
    out = tmp_path / "report.json"
    proc = run_gradsleuth("run", "--format", "json", "--out", out, script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (finding,) = [f for f in report_of(out.read_text())["findings"] if f["code"] == "GS100"]
    assert "started 2 processes running `train`" in finding["message"], finding
    assert "never called in this process" in finding["message"]
    assert finding["location"]["line"] == 19
