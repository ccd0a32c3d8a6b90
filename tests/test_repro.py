"""`gradsleuth repro`: a case of the corpus and a script importing a local module, reduced to
a small standalone program that shows the same finding; the kit's files do what they say."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import ROOT, run_gradsleuth, run_json


def findings(script, tmp_path):
    proc, report = run_json(script, cwd=script.parent, tmp_path=tmp_path)
    assert report is not None, proc.stderr
    return report["findings"]


def test_a_corpus_case_becomes_a_small_standalone_program_with_the_same_finding(tmp_path):
    case = ROOT / "tests" / "cases" / "detach_projector_input" / "train.py"
    kit = tmp_path / "kit"
    # --budget covers the whole command (the first runs and the kit's checks too).
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "120", "--", case, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "GS201 detach kept in" in proc.stdout
    repro = kit / "repro.py"
    program = [line for line in repro.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert len(program) <= 30
    # Standalone: runs with plain Python from another folder, prints the symptom, asserts it.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plain = subprocess.run([sys.executable, str(repro)], cwd=elsewhere, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    assert "no gradient reached: backbone.0.bias" in plain.stdout
    # The same finding, on the same module's parameters.
    [f] = [f for f in findings(repro, tmp_path) if f["code"] == "GS201"]
    assert f["category"] == "detach" and "backbone.0.weight" in f["params"]
    # The test fails while the bug exists.
    test = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", str(kit / "test_repro.py")], capture_output=True, text=True
    )
    assert test.returncode == 1 and "1 failed" in test.stdout
    issue = (kit / "ISSUE.md").read_text()
    for section in ["**Problem.**", "**Root cause.**", "**Fix.**", "**Test.**", "**Performance.**", "| torch |"]:
        assert section in issue
    assert "torch.utils.benchmark" in (kit / "bench_repro.py").read_text()


def test_local_modules_are_pasted_in_and_the_rest_cut(tmp_path):
    (tmp_path / "models.py").write_text(
        textwrap.dedent(
            """
            from __future__ import annotations
            import torch
            from torch import nn

            class Tower(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.encoder = nn.Linear(6, 6)
                    self.heads = [nn.Linear(6, 1), nn.Linear(6, 1)]

                def forward(self, x):
                    h = torch.relu(self.encoder(x))
                    return sum(head(h) for head in self.heads)

            def unused_helper():
                return 42

            if __name__ == "__main__":
                print(Tower())
            """
        )
    )
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import json
            import torch
            from models import Tower as Model

            history = []
            model = Model()
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            for epoch in range(3):
                x = torch.randn(16, 6)
                loss = model(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                history.append(loss.item())
            print(json.dumps(history))
            """
        )
    )
    kit = tmp_path / "kit"
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "90", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "local modules pasted in: models" in proc.stdout
    source = (kit / "repro.py").read_text()
    assert "from models import" not in source and "class Tower" in source
    assert "unused_helper" not in source and "json" not in source and "__main__" not in source
    # Standalone: the kit's folder has no models.py.
    [f] = [f for f in findings(kit / "repro.py", tmp_path) if f["code"] == "GS103"]
    assert f["category"] == "unregistered"


def test_a_local_package_and_its_relative_imports_are_pasted_in(tmp_path):
    # The common project layout: the model in a package beside the script, its modules
    # importing each other relatively; the bug in one of them. The kit is one file.
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    (project / "models" / "__init__.py").write_text("from .tower import Tower\n")
    (project / "models" / "layers.py").write_text(
        textwrap.dedent(
            """
            from torch import nn

            def mlp(dim):
                return nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
            """
        )
    )
    (project / "models" / "tower.py").write_text(
        textwrap.dedent(
            """
            from torch import nn
            from .layers import mlp

            class Tower(nn.Module):
                def __init__(self, dim=6):
                    super().__init__()
                    self.encoder = mlp(dim)
                    self.head = nn.Linear(dim, 1)

                def forward(self, x):
                    return self.head(self.encoder(x).detach())
            """
        )
    )
    script = project / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            from models import Tower

            history = []
            model = Tower()
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            for epoch in range(3):
                loss = model(torch.randn(16, 6)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                history.append(loss.item())
            print(history)
            """
        )
    )
    kit = tmp_path / "kit"
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "90", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "local modules pasted in: models, models.tower, models.layers" in proc.stdout, proc.stdout
    assert not (kit / "models").exists()
    source = (kit / "repro.py").read_text()
    assert "class Tower" in source and "def mlp" in source and "import models" not in source, source
    _standalone(kit / "repro.py", tmp_path)
    [f] = [f for f in findings(kit / "repro.py", tmp_path) if f["code"] == "GS201"]
    assert f["params"][0].startswith("encoder.") and f["location"]["file"].endswith("repro.py")


def test_model_code_the_script_loads_beside_itself_goes_into_the_kit(tmp_path):
    # The bug lives in a model file the script loads by path (`importlib`, next to `__file__`),
    # not by an import repro can paste in: candidates must still find it, and so must the kit.
    project = tmp_path / "project"
    project.mkdir()
    (project / "net_code.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Linear(8, 8)
                    self.head = nn.Linear(8, 2)

                def forward(self, x):
                    return self.head(self.body(x).detach())
            """
        )
    )
    (project / "notes.txt").write_text("not read by the program\n")
    script = project / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import importlib.util
            import os
            import torch

            def load(file):
                path = os.path.join(os.path.dirname(os.path.abspath(__file__)), file)
                spec = importlib.util.spec_from_file_location("net_code", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module

            history = []
            model = load("net_code.py").Net()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(3):
                loss = model(torch.randn(4, 8)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                history.append(loss.item())
            print(history)
            """
        )
    )
    kit = tmp_path / "kit"
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "90", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "files the program reads, copied beside it: net_code.py" in proc.stdout, proc.stdout
    assert (kit / "net_code.py").is_file() and not (kit / "notes.txt").exists()
    source = (kit / "repro.py").read_text()
    assert "history" not in source, source  # reduced, not only copied
    _standalone(kit / "repro.py", tmp_path)
    [f] = [f for f in findings(kit / "repro.py", tmp_path) if f["code"] == "GS201"]
    assert f["params"] == ["body.weight", "body.bias"] and f["location"]["file"].endswith("net_code.py")


def test_an_import_needed_only_for_its_side_effect_is_put_back(tmp_path):
    # The eval's shape: a modified copy of a library model file loaded in place of the
    # original. Importing `torchvision.models` first registers the library's models, so the
    # loader can drop the original's entries before the copy registers the same name again.
    # No name of the import is used: under repro's server, which has the script's packages
    # imported already, a candidate without it shows the finding; run alone it raises.
    project = tmp_path / "project"
    project.mkdir()
    (project / "alexnet.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            from torchvision.models._api import register_model

            class AlexNet(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.features = nn.Linear(8, 8)
                    self.classifier = nn.Linear(8, 2)

                def forward(self, x):
                    return self.classifier(self.features(x).detach())

            @register_model()
            def alexnet(**kwargs):
                return AlexNet()
            """
        )
    )
    script = project / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import importlib.util
            import os
            import sys
            import torch
            import torchvision.models

            def load(file, name):
                path = os.path.join(os.path.dirname(os.path.abspath(__file__)), file)
                registry = getattr(sys.modules.get("torchvision.models._api"), "BUILTIN_MODELS", {})
                for key in [k for k, fn in registry.items() if getattr(fn, "__module__", None) == name]:
                    del registry[key]
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module

            model = load("alexnet.py", "torchvision.models.alexnet").alexnet()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(3):
                loss = model(torch.randn(4, 8)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """
        )
    )
    kit = tmp_path / "kit"
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "90", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "imports put back (run alone, the program needs them): import torchvision.models" in proc.stdout
    assert "warning" not in proc.stdout, proc.stdout
    source = (kit / "repro.py").read_text()
    assert "torch.optim" not in source, source  # reduced, the import put back only
    _standalone(kit / "repro.py", tmp_path)


def test_a_short_script_is_judged_to_its_end(tmp_path):
    # Without `num_labels=3` the config's default head has two outputs, which the first two
    # steps' labels (0, 1) fit; the third step's label 2 does not. The script ends soon, so every
    # candidate runs to its end: the keyword stays and the kit runs alone to its end.
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            import torch.nn.functional as F
            from transformers import BertConfig, BertForSequenceClassification

            config = BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                vocab_size=50, max_position_embeddings=16, num_labels=3)
            model = BertForSequenceClassification(config)
            opt = torch.optim.AdamW(model.classifier.parameters(), lr=1e-3)
            for step in range(4):
                ids, y = torch.randint(0, 50, (2, 8)), torch.tensor([step % 3, 0])
                loss = F.cross_entropy(model(input_ids=ids).logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            """
        )
    )
    kit = tmp_path / "kit"
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "90", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    source = (kit / "repro.py").read_text()
    assert "num_labels=3" in source and "warning" not in proc.stdout, proc.stdout
    _standalone(kit / "repro.py", tmp_path)


def test_a_candidate_much_slower_than_the_program_is_not_kept(tmp_path):
    # `settle(..., seconds=0.0)`: without the keyword the finding still holds, but every step
    # waits the default 20 s (as a config without `hidden_size=32` builds the default, large
    # model). A smaller program that much slower is not a better repro.
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import time
            import torch

            def settle(x, seconds=20.0):
                return x if time.sleep(seconds + 1e-6 * torch.rand(()).item()) is None else x

            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(3):
                h = settle(model[0](torch.randn(8, 4)), seconds=0.0).detach()
                loss = model[1](h).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """
        )
    )
    kit = tmp_path / "kit"
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "90", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    source = (kit / "repro.py").read_text()
    assert "GS201" in source and "seconds=0.0)" in source, source


def test_nothing_to_reproduce_and_bad_input_are_clear_errors(tmp_path):
    clean = tmp_path / "clean.py"
    clean.write_text(
        "import torch\nm = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(2):\n    opt.zero_grad()\n    m(torch.randn(4, 2)).sum().backward()\n    opt.step()\n"
    )
    proc = run_gradsleuth("repro", clean, cwd=tmp_path)
    assert proc.returncode == 2 and "to reproduce" in proc.stderr, proc.stderr
    for args, message in [((tmp_path / "nope.py",), "no such script"), ((), "nothing to reduce")]:
        proc = run_gradsleuth("repro", *args, cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and "panicked" not in proc.stderr


def _program(path):
    return [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _standalone(repro, tmp_path):
    """Runs `repro` with plain Python from an empty folder (no data, no checkpoint there)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    plain = subprocess.run([sys.executable, str(repro)], cwd=elsewhere, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr[-2000:]


def test_data_loading_becomes_random_tensors_of_the_observed_shapes(tmp_path):
    # A script that reads its features from CSV files through a Dataset and a DataLoader, with
    # argparse, evaluation, a scheduler, logging and checkpoints.
    script = tmp_path / "train.py"
    script.write_text((ROOT / "tests" / "repro" / "csv_classifier.py").read_text())
    data = tmp_path / "data"
    data.mkdir()
    for name, rows in [("train", 64), ("val", 16)]:
        lines = [",".join(f"{(i * 7 + j) % 10 / 10:.1f}" for j in range(12)) + f",{i % 5}" for i in range(rows)]
        (data / f"{name}.csv").write_text("\n".join(lines) + "\n")
    kit = tmp_path / "kit"
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "180", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "GS201 detach kept in" in proc.stdout
    assert "rebuilt from what the script saw" in proc.stdout and "step, (x, y)" in proc.stdout
    repro = kit / "repro.py"
    source = repro.read_text()
    # The loader's batch is rebuilt: float features of the observed shape and range, integer
    # labels in the observed range; the dataset, its files and the command line are gone.
    assert "torch.empty((16, 12)).uniform_(0, 0.9)" in source and "torch.randint(0, 5, (16,))" in source
    for gone in ["csv", "CsvFeatures", "argparse", "DataLoader(", "torch.save"]:
        assert gone not in source, source
    assert len(_program(repro)) <= 30, source
    _standalone(repro, tmp_path)
    [f] = [f for f in findings(repro, tmp_path) if f["code"] == "GS201"]
    assert sorted(f["params"]) == ["encoder.0.bias", "encoder.0.weight", "encoder.2.bias", "encoder.2.weight"]


def test_a_pretrained_model_is_rebuilt_from_its_config(tmp_path):
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    BertModel(config).save_pretrained(tmp_path / "ckpt")
    script = tmp_path / "train.py"
    script.write_text((ROOT / "tests" / "repro" / "hf_pretrained_tagger.py").read_text())
    kit = tmp_path / "kit"
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "60", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "GS201 detach kept in" in proc.stdout and "self.encoder" in proc.stdout
    repro = kit / "repro.py"
    source = repro.read_text()
    # Built from the entries that differ from BertConfig's defaults, with random weights: the
    # program needs no checkpoint folder.
    assert "transformers.BertModel(transformers.BertConfig(" in source and "from_pretrained" not in source
    assert "hidden_size=16" in source and "hidden_act" not in source, source
    _standalone(repro, tmp_path)
    [f] = [f for f in findings(repro, tmp_path) if f["code"] == "GS201"]
    assert "encoder.embeddings.word_embeddings.weight" in f["params"]


def test_a_model_local_to_main_is_checked_and_keyword_arguments_go(tmp_path):
    """The kit's check finds a model that lived in `main()` (a global hook kept the modules the
    program called), and keyword arguments the finding does not need are dropped."""
    script = ROOT / "tests" / "repro" / "main_local_detach.py"
    kit = tmp_path / "kit"
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "90", "--", script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "prints the symptom and asserts it" in proc.stdout, proc.stdout
    text = (kit / "repro.py").read_text()
    assert "def main():" in text and "weight_decay" not in text and "betas" not in text, text
    plain = subprocess.run([sys.executable, str(kit / "repro.py")], cwd=tmp_path, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    assert "no gradient reached: body.0.bias, body.0.weight" in plain.stdout, plain.stdout
