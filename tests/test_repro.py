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
    proc = run_gradsleuth("repro", "--out", kit, "--budget", "90", "--", case, cwd=tmp_path)
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
