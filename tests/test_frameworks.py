"""The frameworks users train with, unmodified: Lightning's Trainer (a LightningModule whose
training_step calls its layers directly, manual optimization with two optimizers) and PEFT
LoRA on a transformers model with gradient checkpointing, a loop started by `accelerate
launch` (observed in the worker it starts, through the bootstrap's `sitecustomize`). Also a cut
inside an installed library, without any framework: the location is the user's line, the
library's is related.

Buggy scripts: the right category, exact parameter names (by the user's model, never a class
name), the user's line. Controls: no warning and no error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import BIN, report_of, run_gradsleuth, run_json

HERE = Path(__file__).resolve().parent / "frameworks"


def _run(tmp_path, script: Path, *args):
    proc, report = run_json(script.name, *args, cwd=script.parent, tmp_path=tmp_path)
    assert report is not None, proc.stderr[-3000:]
    return report


def _loud(report):
    return [f for f in report["findings"] if f["severity"] in ("error", "warning")]


def test_lightning_names_parameters_by_the_lightning_module_and_points_at_training_step(tmp_path):
    report = _run(tmp_path, HERE / "lightning_detach.py")
    [f] = _loud(report)
    assert f["category"] == "detach"
    assert sorted(f["params"]) == ["encoder.0.bias", "encoder.0.weight"]
    assert f["location"]["file"] == "lightning_detach.py" and f["location"]["line"] == 17
    names = {p["name"] for p in report["parameters"]}
    assert names == {"encoder.0.weight", "encoder.0.bias", "decoder.0.weight", "decoder.0.bias"}


def test_lightning_names_a_global_model_as_the_lightning_module_holds_it(tmp_path):
    # `model` is also a global of the script, but Lightning's checkpoints, its summary and
    # configure_optimizers (`self.model.parameters()`) name it through the LightningModule.
    report = _run(tmp_path, HERE / "lightning_wrapped_model.py")
    [f] = _loud(report)
    assert f["category"] == "detach"
    assert sorted(f["params"]) == ["model.backbone.0.bias", "model.backbone.0.weight"]
    assert f["location"]["file"] == "lightning_wrapped_model.py" and f["location"]["line"] == 16
    names = {p["name"] for p in report["parameters"]}
    assert names == {
        "model.backbone.0.weight", "model.backbone.0.bias", "model.classifier.weight", "model.classifier.bias"
    }, names


def test_lightning_configure_optimizers_over_one_submodule(tmp_path):
    report = _run(tmp_path, HERE / "lightning_optimizer_missing.py")
    [f] = _loud(report)
    assert f["category"] == "optimizer_missing"
    assert sorted(f["params"]) == ["decoder.0.bias", "decoder.0.weight"]
    assert f["location"]["line"] == 20
    # The fix speaks of the LightningModule as `self`, where configure_optimizers sees it.
    assert "self.decoder.parameters()" in f["fix"]


def test_lightning_two_optimizer_gan_is_quiet_and_names_both_networks(tmp_path):
    report = _run(tmp_path, HERE / "lightning_gan.py")
    assert not _loud(report), report["findings"]
    names = {p["name"] for p in report["parameters"]}
    assert {"generator.0.weight", "discriminator.0.weight"} <= names, names
    assert all(p["status"] == "learning" for p in report["parameters"]), report["parameters"]


def test_lightning_toggle_optimizer_is_no_freeze_and_keeps_the_scripts_own(tmp_path):
    """`toggle_optimizer` turns off, for one optimizer's step, every parameter the other holds:
    observation ends inside such a window, and the generator is not told frozen (nor the
    discriminator). A freeze the script made stays the script's, at its line, when Lightning's
    toggles set the same flags again."""
    script = HERE / "lightning_gan_toggled.py"
    (tmp_path / "control").mkdir()
    (tmp_path / "frozen").mkdir()
    report = _run(tmp_path / "control", script)
    assert all(f["code"] != "GS101" for f in report["findings"]), report["findings"]
    assert not _loud(report), report["findings"]
    assert all(p["status"] == "learning" for p in report["parameters"]), report["parameters"]
    report = _run(tmp_path / "frozen", script, "--freeze-discriminator")
    frozen = [f for f in report["findings"] if f["code"] == "GS101"]
    assert len(frozen) == 1, report["findings"]
    f = frozen[0]
    assert f["severity"] == "warning" and "lightning" not in f["message"], f
    assert f["location"]["line"] == 50, f
    assert sorted(f["params"]) == sorted(
        f"discriminator.{i}.{w}" for i in (0, 2) for w in ("weight", "bias")
    ), f["params"]


def test_lightning_gan_stepping_the_discriminator_before_the_generators_backward(tmp_path):
    """Lightning steps through a closure of its own (the mode keeps recording inside the step):
    the backward's in-place error is the discriminator's step, at the user's `opt_d.step()`,
    naming the weight it changed; the generator's step, never reached, is not told as missing."""
    report = _run(tmp_path, HERE / "lightning_gan_step_before_backward.py")
    loud = _loud(report)
    assert [f["code"] for f in loud] == ["GS208"], loud
    f = loud[0]
    assert f["location"]["line"] == 26 and f["params"] == ["discriminator.2.weight"], f
    assert f["message"].startswith("`Adam.step()` updates the parameter"), f["message"]
    assert "modified by an inplace operation" in report["error"]["message"]


def test_lightning_fp16_scaler_finding_its_scale_is_not_a_bug_one_that_never_steps_is(tmp_path):
    """A GradScaler skips steps (no optimizer hook runs) while its scale overflows: the first
    steps of fp16 training. Observation goes on until the requested steps were taken, and the
    run is quiet; when activations overflow fp16 at any scale, no step is ever taken, and after
    32 more skipped steps that is GS109, at the user's `trainer.fit`."""
    script = HERE / "lightning_fp16_scaler.py"
    proc, report = run_json(script.name, cwd=script.parent, tmp_path=tmp_path)
    assert report is not None, proc.stderr[-3000:]
    assert not _loud(report), report["findings"]
    assert report["steps_observed"] == 3
    assert all(p["status"] == "learning" for p in report["parameters"]), report["parameters"]
    proc, report = run_json(script.name, "--overflow", cwd=script.parent, tmp_path=tmp_path)
    assert report is not None, proc.stderr[-3000:]
    [f] = _loud(report)
    assert (f["code"], f["severity"]) == ("GS109", "error")
    assert (f["location"]["file"], f["location"]["line"]) == (script.name, 35)
    assert len(f["steps"]) == 35, f["steps"]


def test_peft_adapters_cut_off_by_reentrant_checkpointing(tmp_path):
    report = _run(tmp_path, HERE / "peft_vit_reentrant_checkpointing.py")
    [f] = _loud(report)
    assert f["category"] == "no_grad" and f["code"] == "GS203"
    lora = sorted(p["name"] for p in report["parameters"] if ".lora_" in p["name"])
    assert len(lora) == 8 and sorted(f["params"]) == lora
    # Named inside the user's ViT: PEFT's `base_model.model.` wrapper prefix taken off once.
    assert lora[0].startswith("vit.layers.0.attention."), lora
    # At the user's line that turned checkpointing on, not inside transformers or peft.
    assert f["location"]["file"] == "peft_vit_reentrant_checkpointing.py"
    assert "gradient_checkpointing_enable" in f["location"]["snippet"]
    assert "reentrant" in f["message"] and "use_reentrant" in f["fix"]
    assert "enable_input_require_grads" in f["fix"]
    related = [r["location"]["file"] for r in f.get("related", [])]
    assert "peft_vit_reentrant_checkpointing.py" in related
    assert any("site-packages" in r for r in related), related


def test_peft_checkpointing_with_input_gradients_is_quiet(tmp_path):
    report = _run(tmp_path, HERE / "peft_vit_checkpointing_control.py")
    assert not _loud(report), report["findings"]
    lora = [p for p in report["parameters"] if ".lora_" in p["name"]]
    assert len(lora) == 8 and all(p["status"] == "learning" for p in lora), lora


LIBRARY = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d, stop=False):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.stop = stop

    def forward(self, x):
        h = torch.relu(self.lin(x))
        if self.stop:
            h = h.detach()
        return h
"""

SCRIPT = """
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import torch
from torch import nn
from blocklib import Block


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = Block(8, stop=True)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.enc(x)
        return self.head(h)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("folder", ["site-packages", "dist-packages"])
def test_a_cut_inside_an_installed_library_is_located_at_the_users_call(tmp_path, folder):
    lib = tmp_path / folder / "blocklib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(LIBRARY)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace('"site-packages"', f'"{folder}"'))
    report = _run(tmp_path, script)
    [f] = _loud(report)
    assert f["category"] == "detach" and sorted(f["params"]) == ["enc.lin.bias", "enc.lin.weight"]
    assert f["location"]["file"] == "train.py"
    assert f["location"]["snippet"].strip() == "h = self.enc(x)"
    [r] = f["related"]
    assert r["location"]["file"].endswith("blocklib/__init__.py")
    assert r["location"]["snippet"].strip() == "h = h.detach()"


def _launched(tmp_path, *command, cwd, env=None):
    """`gradsleuth run --format json -- COMMAND...` with the virtualenv's programs on PATH."""
    out = tmp_path / "report.json"
    full_env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    proc = run_gradsleuth("run", "--format", "json", "--out", out, "--", *command, cwd=cwd, env=full_env)
    return proc, (report_of(out.read_text()) if out.exists() else None)


def test_a_job_started_by_accelerate_launch_is_observed_in_its_worker(tmp_path):
    proc, report = _launched(
        tmp_path, "accelerate", "launch", "--cpu", "--num_processes", "1", "accelerate_detach.py", cwd=HERE
    )
    assert report is not None, proc.stderr[-3000:]
    assert report["steps_observed"] == 3
    [f] = _loud(report)
    assert f["category"] == "detach" and sorted(f["params"]) == ["encoder.0.bias", "encoder.0.weight"]
    assert f["location"]["file"] == "accelerate_detach.py" and f["location"]["line"] == 15


def test_accelerates_clipping_with_a_bound_of_0_is_named_at_the_scripts_call(tmp_path):
    """`accelerator.clip_grad_norm_` clips with `clip_grads_with_norm_` where torch has it, not
    `clip_grad_norm_`: the zero bound is still found, told at the script's line by the call the
    script made."""
    report = _run(tmp_path, HERE / "accelerate_clip_zero.py")
    [f] = _loud(report)
    assert f["category"] == "grad_clip", f
    assert f["location"]["file"] == "accelerate_clip_zero.py" and f["location"]["line"] == 19
    assert f["message"].startswith("`Accelerator.clip_grad_norm_` clips with a bound of 0"), f["message"]
    assert sorted(f["params"]) == ["0.bias", "0.weight", "2.bias", "2.weight"]


def test_a_job_started_by_fabric_run_is_observed_in_both_ranks_under_the_users_names(tmp_path):
    """`fabric run` (Lightning's `lightning run model`) starts rank 0 and re-executes the script
    for rank 1: both are traced through the bootstrap, and Fabric's `_FabricModule` and DDP
    wrappers are stripped from the names."""
    proc, report = _launched(
        tmp_path, "fabric", "run", "--accelerator", "cpu", "--devices", "2", "fabric_optimizer_missing.py", cwd=HERE
    )
    assert report is not None, proc.stderr[-3000:]
    [f] = _loud(report)
    assert f["category"] == "optimizer_missing" and sorted(f["params"]) == ["head.bias", "head.weight"]
    assert (f["location"]["file"], f["location"]["line"]) == ("fabric_optimizer_missing.py", 23)
    assert f["ranks"] == [0, 1], f
    names = {p["name"] for p in report["parameters"]}
    assert names == {"encoder.0.weight", "encoder.0.bias", "head.weight", "head.bias"}, names


@pytest.mark.parametrize(
    ("script", "ranks", "stage"),
    [
        ("deepspeed_zero_detach.py", 2, 2),
        ("deepspeed_zero_detach.py", 2, 3),
        ("deepspeed_zero_control.py", 1, 2),
        ("deepspeed_zero_control.py", 2, 3),
    ],
    ids=["detach-zero2", "detach-zero3", "control-zero2", "control-zero3"],
)
def test_deepspeed_zero_started_by_its_launcher(tmp_path, script, ranks, stage):
    """`gradsleuth run -- deepspeed ...`: ZeRO's optimizer updates flat partitions of the
    parameters (held by the inner torch optimizer) and copies them back after its own step;
    `.grad` is None by design. The optimizer is reported as holding the model's parameters,
    updates are measured after the copy-back, names carry no `module.` of the engine. ZeRO-3
    runs each Linear and module boundary through custom autograd Functions whose forwards
    detach and run without recording: none of that is a cut. A correct run is quiet and every
    parameter learns; the user's detach is found, once, on every rank."""
    proc, report = _launched(tmp_path, "deepspeed", "--num_gpus", str(ranks), script, "--stage", str(stage), cwd=HERE)
    assert report is not None, proc.stderr[-3000:]
    names = {p["name"] for p in report["parameters"]}
    assert names == {"encoder.0.weight", "encoder.0.bias", "head.weight", "head.bias"}, names
    loud = _loud(report)
    if script.endswith("control.py"):
        assert not loud, loud
        assert all(p["status"] == "learning" for p in report["parameters"]), report["parameters"]
        return
    [f] = loud
    assert f["category"] == "detach" and sorted(f["params"]) == ["encoder.0.bias", "encoder.0.weight"]
    assert (f["location"]["file"], f["location"]["line"]) == (script, 18)
    assert f["ranks"] == list(range(ranks)), f


@pytest.mark.parametrize("launcher", [["python"], ["accelerate", "launch", "--cpu", "--num_processes", "1"]])
def test_a_job_that_runs_a_module_is_observed_in_the_interpreter_running_it(tmp_path, launcher):
    """`gradsleuth run -- python -m NAME` / `-- accelerate launch -m NAME`: the interpreter started
    with `-m NAME` traces; the launcher's own interpreter does not."""
    proc, report = _launched(tmp_path, *launcher, "-m", "accelerate_detach", cwd=HERE)
    assert report is not None, proc.stderr[-3000:]
    assert report["steps_observed"] == 3
    [f] = _loud(report)
    assert f["category"] == "detach" and sorted(f["params"]) == ["encoder.0.bias", "encoder.0.weight"]
    assert f["location"]["file"] == "accelerate_detach.py" and f["location"]["line"] == 15


def test_a_python_command_keeps_the_sitecustomize_it_hides(tmp_path):
    own = tmp_path / "site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = '1'\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import os\nimport torch\n"
        "assert os.environ.get('USER_SITECUSTOMIZE_RAN') == '1', 'the user sitecustomize did not run'\n"
        "w = torch.nn.Linear(3, 1)\nopt = torch.optim.SGD(w.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    loss = w(torch.randn(4, 3)).detach().sum() + w.bias.pow(2).sum()\n"
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
    )
    proc, report = _launched(tmp_path, "python", "train.py", cwd=tmp_path, env={"PYTHONPATH": str(own)})
    assert report is not None and proc.returncode == 1, proc.stderr[-3000:]
    assert [f["params"] for f in _loud(report)] == [["weight"]], report["findings"]


def test_a_command_without_a_script_is_a_clear_usage_error(tmp_path):
    proc, report = _launched(tmp_path, "env", "true", cwd=tmp_path)
    assert proc.returncode == 2 and report is None
    assert "cannot tell which script `env` runs" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "script", ["hf_trainer_accumulation_control.py", "lightning_validation_accumulation_control.py"]
)
def test_framework_controls_are_quiet(tmp_path, script):
    # Run from a copy: the frameworks write their output folders next to the script.
    copy = tmp_path / script
    copy.write_text((HERE / script).read_text())
    report = _run(tmp_path, copy)
    assert not _loud(report), report["findings"]
    assert report["steps_observed"] == 3
    assert all(p["status"] == "learning" for p in report["parameters"]), report["parameters"]


def test_hf_trainer_compute_loss_detach_found_by_run_and_by_lint(tmp_path):
    """A `Trainer` subclass's `compute_loss` detaches BERT's pooled output before the head:
    the run names the encoder's parameters at that line; lint, which reads `compute_loss`'s
    loss (the first of `(loss, logits)`) as the one the Trainer calls backward on and its
    `model` as the one the Trainer optimizes, flags the same line."""
    script = "hf_trainer_compute_loss_detach.py"
    copy = tmp_path / script
    copy.write_text((HERE / script).read_text())
    report = _run(tmp_path, copy)
    [f] = _loud(report)
    assert f["category"] == "detach" and f["location"]["line"] == 24
    assert len(f["params"]) == 39 and all(p.startswith("bert.") for p in f["params"])
    learning = sorted(p["name"] for p in report["parameters"] if p["status"] == "learning")
    assert learning == ["classifier.bias", "classifier.weight"]
    proc = run_gradsleuth("lint", "--isolated", "--format", "json", copy)
    [g] = report_of(proc.stdout)["findings"]
    assert (g["category"], g["location"]["line"]) == ("detach", 24)
    assert "model.bert" in g["message"]
    # The correct Trainer script beside it: nothing.
    proc = run_gradsleuth("lint", "--isolated", "--format", "json", HERE / "hf_trainer_accumulation_control.py")
    assert proc.returncode == 0 and not report_of(proc.stdout)["findings"]


@pytest.mark.parametrize(
    "command",
    [
        ["python", "lightning_ddp_bf16_control.py"],
        ["torchrun", "--nproc-per-node", "2", "accelerate_accumulate_control.py"],
    ],
    ids=["lightning-ddp-bf16", "accelerate-two-processes"],
)
def test_two_rank_framework_controls_are_quiet_on_both_ranks(tmp_path, command):
    """Lightning's Trainer (`strategy="ddp"`, two CPU devices, `bf16-mixed`, accumulation)
    re-executes the script for rank 1; accelerate under torchrun trains MULTI_CPU with
    `accelerator.accumulate`. Both ranks are traced, every step counted once, nothing said."""
    for script in command[1:]:
        if script.endswith(".py"):
            (tmp_path / script).write_text((HERE / script).read_text())
    proc, report = _launched(tmp_path, *command, cwd=tmp_path)
    assert report is not None, proc.stderr[-3000:]
    assert not _loud(report), report["findings"]
    [per_rank] = [f for f in report["findings"] if f["code"] == "GS132"]
    assert "ranks 0-1: 3" in per_rank["message"], per_rank
    assert all(p["status"] == "learning" for p in report["parameters"]), report["parameters"]


def test_hf_trainer_checkpointing_from_training_arguments(tmp_path):
    copy = tmp_path / "hf_trainer_peft_reentrant_checkpointing.py"
    copy.write_text((HERE / copy.name).read_text())
    report = _run(tmp_path, copy)
    [f] = _loud(report)
    assert f["category"] == "no_grad" and len(f["params"]) == 8
    assert all(".lora_" in p for p in f["params"])
    # The TrainingArguments line that turned checkpointing on.
    assert "gradient_checkpointing=True" in f["location"]["snippet"]


def _plain(tmp_path, script):
    """Runs a copy of `script` with plain python (no gradsleuth command) in `tmp_path`."""
    import subprocess
    import sys

    copy = tmp_path / script
    copy.write_text((HERE / script).read_text())
    return subprocess.run([sys.executable, copy.name], cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_the_hugging_face_callback_reports_into_the_output_folder(tmp_path):
    proc = _plain(tmp_path, "hf_callback_peft_checkpointing.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "error[GS203] no_grad" in proc.stdout  # printed when the observed steps end
    report = report_of((tmp_path / "out" / "gradsleuth-report.json").read_text())
    assert (tmp_path / "out" / "gradsleuth-report.html").read_text().lower().startswith("<!doctype html>")
    [f] = _loud(report)
    assert f["category"] == "no_grad" and len(f["params"]) == 8
    assert all(p.startswith("vit.layers.") and ".lora_" in p for p in f["params"]), f["params"]
    assert "gradient_checkpointing=True" in f["location"]["snippet"]


def test_the_lightning_callback_reports_into_the_root_folder(tmp_path):
    proc = _plain(tmp_path, "lightning_callback_detach.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = report_of((tmp_path / "lightning_out" / "gradsleuth-report.json").read_text())
    [f] = _loud(report)
    assert f["category"] == "detach" and sorted(f["params"]) == ["encoder.0.bias", "encoder.0.weight"]
    lines = (HERE / "lightning_callback_detach.py").read_text().splitlines()
    assert f["location"]["line"] == 1 + next(i for i, t in enumerate(lines) if ".detach()" in t)
    assert report["steps_observed"] == 3


def test_the_lightning_callback_with_watch_reports_a_nan_long_after_the_observed_steps(tmp_path):
    """`LightningCallback(steps=3, watch=True)`: the first three steps are diagnosed, the whole
    run watched, and the report written when training ends. Lightning runs each step's forward
    and backward inside the closure it passes to `optimizer.step`: the NaN of step 11 is told at
    step 11 and traced to the division in `training_step`."""
    proc = _plain(tmp_path, "lightning_callback_watch_nan.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = report_of((tmp_path / "lightning_out" / "gradsleuth-report.json").read_text())
    assert report["command"] == "watch" and report["steps_observed"] == 16
    [f] = _loud(report)
    assert (f["code"], f["steps"]) == ("GS140", [11]), f
    assert "`Tensor.div`" in f["message"], f["message"]
    assert f["location"]["line"] == 20 and "/ tau" in f["location"]["snippet"]


def test_watch_locates_a_nan_born_inside_an_installed_library_where_it_happens(tmp_path):
    # The NaN's origin is found by replaying the step from gradsleuth's code: there is no user
    # line around the op then, and the library's line is where it happens.
    lib = tmp_path / "site-packages" / "nanlib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass LogLayer(nn.Module):\n"
        "    def __init__(self, d):\n        super().__init__()\n        self.lin = nn.Linear(d, d)\n\n"
        "    def forward(self, x):\n        return torch.log(self.lin(x))\n"
    )
    script = tmp_path / "train.py"
    script.write_text(
        "import os\nimport sys\n\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'site-packages'))\n"
        "import torch\nfrom nanlib import LogLayer\nfrom torch import nn\n\n"
        "torch.manual_seed(0)\nmodel = nn.Sequential(LogLayer(4), nn.Linear(4, 1))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(6):\n"
        "    x = torch.randn(8, 4) if step == 4 else torch.rand(8, 4) + 5\n"
        "    with torch.no_grad():\n        model[0].lin.bias.fill_(10.0 if step != 4 else -100.0)\n"
        "    loss = model(x).pow(2).mean()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
    )
    proc, report = run_json(script.name, cwd=tmp_path, tmp_path=tmp_path, extra=("--watch",))
    assert report is not None, proc.stderr[-3000:]
    [f] = [f for f in report["findings"] if f["code"] == "GS140"]
    assert f["location"]["file"].endswith("nanlib/__init__.py"), f["location"]
    assert f["location"]["snippet"].strip() == "return torch.log(self.lin(x))"


def test_unused_parts_of_library_models_are_info_lines_and_a_dropped_user_head_an_error(tmp_path):
    # BertModel runs its pooler; the loss takes the hidden states only.
    report = _run(tmp_path, HERE / "bert_hidden_states_control.py")
    assert not _loud(report), report["findings"]
    [info] = [f for f in report["findings"] if "encoder.pooler.dense.weight" in f["params"]]
    assert (info["severity"], info["code"]) == ("info", "GS102") and "no op uses its output" in info["message"]
    assert "`encoder` (BertModel)" in info["message"]
    # CLIP used through `get_text_features`: `logit_scale` is read by no op.
    report = _run(tmp_path, HERE / "clip_text_features_control.py")
    assert not _loud(report), report["findings"]
    [info] = [f for f in report["findings"] if f["params"] == ["clip.logit_scale"]]
    assert (info["severity"], info["code"]) == ("info", "GS102") and "read by no op" in info["message"]
    # The user's own auxiliary head whose loss term was forgotten: computed and dropped.
    report = _run(tmp_path, HERE / "aux_head_dropped.py")
    [f] = _loud(report)
    assert (f["severity"], f["category"]) == ("error", "unused") and "computed and dropped" in f["message"]
    # At the user's line that calls it.
    assert (f["location"]["file"], f["location"]["line"]) == ("aux_head_dropped.py", 18)
    assert sorted(f["params"]) == ["aux.0.bias", "aux.0.weight", "aux.2.bias", "aux.2.weight"]


def test_what_peft_froze_and_the_script_unfroze_is_told_at_the_unfreeze(tmp_path):
    """PEFT's config says what trains and what `save_pretrained` keeps: a head unfrozen by
    hand trains and is lost on save (or, unfrozen after the optimizer was built, never
    changes), a base unfrozen whole fine-tunes in full (warnings at the user's unfreezing line,
    PEFT's freeze as related); unfreezing only the original PEFT routes around is info, not an
    "unused module" error. PEFT's own unfreezing (`bias="all"`), an adapter loaded for inference
    whose own weights the script unfreezes, and unfreezing outside PEFT (the
    `control_progressive_unfreeze` case) stay quiet. Lint (GS325) flags the same lines."""
    script = HERE / "peft_unfrozen_by_script.py"
    report = _run(tmp_path, script, "--shape", "head")
    [f] = _loud(report)
    assert (f["severity"], f["code"], f["location"]["line"]) == ("warning", "GS111", 35), f
    assert sorted(f["params"]) == ["classifier.bias", "classifier.weight"]
    assert "lost when the adapter is saved" in f["message"] and 'modules_to_save=["classifier"]' in f["fix"]
    assert f["related"][0]["location"]["line"] == 27
    # Unfrozen after the optimizer was built: it never changes (one finding, not also GS106).
    report = _run(tmp_path, script, "--shape", "late")
    [f] = _loud(report)
    assert (f["severity"], f["code"], f["location"]["line"]) == ("warning", "GS111", 35), f
    assert "no optimizer holds them" in f["message"] and sorted(f["params"]) == ["classifier.bias", "classifier.weight"]
    report = _run(tmp_path, script, "--shape", "all")
    [f] = _loud(report)
    assert (f["severity"], f["code"], f["location"]["line"]) == ("warning", "GS111", 31), f
    assert "fine-tunes in full" in f["message"] and "classifier.original_module.weight" in f["params"]
    assert len(f["params"]) == 41
    report = _run(tmp_path, script, "--shape", "original")
    assert not _loud(report), report["findings"]
    [f] = [f for f in report["findings"] if f["code"] == "GS111"]
    assert f["severity"] == "info" and "PEFT runs the trainable copy" in f["message"]
    for args in (("--shape", "bias"), ()):
        report = _run(tmp_path, script if args else HERE / "peft_adapter_reloaded_control.py", *args)
        assert not _loud(report) and all(f["code"] != "GS111" for f in report["findings"]), report["findings"]
    # Lint reads the same two unfreezing lines; the control PEFT script stays clean.
    proc = run_gradsleuth("lint", "--isolated", "--format", "json", script)
    assert [(g["code"], g["location"]["line"]) for g in report_of(proc.stdout)["findings"]] == [
        ("GS325", 31),
        ("GS325", 35),
    ]
    proc = run_gradsleuth("lint", "--isolated", "--format", "json", HERE / "peft_classifier_saved_control.py")
    assert proc.returncode == 0 and not report_of(proc.stdout)["findings"]


def test_adapters_on_a_module_whose_output_nothing_uses_are_named_with_the_configs_fix(tmp_path):
    report = _run(tmp_path, HERE / "peft_adapter_on_unused_output.py")
    assert not _loud(report), report["findings"]
    [f] = [f for f in report["findings"] if f["code"] == "GS102"]
    assert f["severity"] == "info" and "The adapters PEFT put on `pooler.dense` therefore never train" in f["message"]
    assert "out of the adapter config's `target_modules`" in f["fix"]
    assert sorted(f["params"]) == [f"encoder.pooler.dense.lora_{ab}.default.weight" for ab in "AB"]


def test_a_fresh_head_frozen_while_the_layers_below_train_is_a_warning_at_the_freeze(tmp_path):
    """Freezing judged by intent: a layer not loaded with the rest of the model's weights
    (torch's `load_state_dict`, transformers' `from_pretrained`) frozen by the user's filter or
    by PEFT while the layers below it train stays at random values: a warning at the line that
    froze it. Frozen layers that were loaded stay deliberate freezing (info), whichever loader
    wrote them (transformers' low-memory one creates new parameters without `load_state_dict`
    before 4.51; `eval/compat.py` runs it there)."""
    cases = [
        ("resnet_finetune_frozen_head.py", (), 20, ["fc.bias", "fc.weight"]),
        ("bert_classifier_frozen_by_filter.py", (), 19, ["classifier.bias", "classifier.weight"]),
        ("bert_classifier_frozen_by_filter.py", ("--low-mem",), 19, ["classifier.bias", "classifier.weight"]),
        ("peft_classifier_not_saved.py", (), 17, ["classifier.bias", "classifier.weight"]),
    ]
    for script, args, line, params in cases:
        report = _run(tmp_path, HERE / script, *args)
        [f] = _loud(report)
        assert (f["severity"], f["code"]) == ("warning", "GS101"), f
        assert "not loaded with the rest of the model's weights" in f["message"], f["message"]
        assert sorted(f["params"]) == params
        assert (f["location"]["file"], f["location"]["line"]) == (script, line), f["location"]
        # The rest of the freeze was deliberate, and is told as such.
        assert any(g["severity"] == "info" and g["code"] == "GS101" for g in report["findings"])
    # The same filter on a checkpoint that holds the classifier: deliberate freezing only.
    controls = [("resnet_finetune_control.py",), ("peft_classifier_saved_control.py",)]
    controls += [("bert_classifier_frozen_by_filter.py", "--full", *low) for low in ((), ("--low-mem",))]
    for control, *args in controls:
        report = _run(tmp_path, HERE / control, *args)
        assert not _loud(report), (args, report["findings"])
