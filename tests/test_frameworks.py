"""The frameworks users train with, unmodified: Lightning's Trainer (a LightningModule whose
training_step calls its layers directly, manual optimization with two optimizers) and PEFT
LoRA on a transformers model with gradient checkpointing. Also a cut inside an installed
library, without any framework: the location is the user's line, the library's is related.

Buggy scripts: the right category, exact parameter names (by the user's model, never a class
name), the user's line. Controls: no warning and no error."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_json

HERE = Path(__file__).resolve().parent / "frameworks"


def _run(tmp_path, script: Path):
    proc, report = run_json(script.name, cwd=script.parent, tmp_path=tmp_path)
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


def test_peft_adapters_cut_off_by_reentrant_checkpointing(tmp_path):
    report = _run(tmp_path, HERE / "peft_vit_reentrant_checkpointing.py")
    [f] = _loud(report)
    assert f["category"] == "no_grad" and f["code"] == "GS203"
    lora = sorted(p["name"] for p in report["parameters"] if ".lora_" in p["name"])
    assert len(lora) == 8 and sorted(f["params"]) == lora
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


LIBRARY = '''
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
'''

SCRIPT = '''
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
'''


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
