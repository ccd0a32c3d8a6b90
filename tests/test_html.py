"""The HTML report in a real browser (Debian's Chromium, headless; `make test` installs it):
every finding present, the autograd graph with the cut drawn in red, the table filter working,
no console errors, user text rendered as text, a screenshot kept for a human to look at."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, report_of, run_gradsleuth

CASES = ROOT / "tests" / "cases"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _browser(page: Path, *extra: str) -> subprocess.CompletedProcess:
    assert CHROMIUM, "chromium is installed by `make test` (Debian's package)"
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *extra, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )


def _dom(page: Path, probe: str = "") -> tuple[str, str]:
    """The DOM after the page's scripts ran (and `probe`, a script appended for the test)."""
    if probe:
        probed = page.with_name(page.stem + ".probe.html")
        probed.write_text(page.read_text().replace("</body>", f"<script>{probe}</script></body>"))
        page = probed
    proc = _browser(page, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]


def _report(script: Path, tmp_path: Path, cwd: Path) -> tuple[Path, dict]:
    html = tmp_path / "report.html"
    js = tmp_path / "report.json"
    run_gradsleuth("run", "--format", "html", "--out", html, script, cwd=cwd)
    run_gradsleuth("run", "--format", "json", "--out", js, script, cwd=cwd)
    return html, report_of(js.read_text())


def test_the_report_in_chromium(tmp_path):
    page, report = _report(Path("train.py"), tmp_path, CASES / "detach_projector_input")
    dom, stderr = _dom(
        page,
        "addEventListener('load',()=>{gsFilter('grad_none');"
        "document.body.dataset.visible=[...document.querySelectorAll('#params tbody tr')]"
        ".map(r=>r.cells[0].textContent).join(',')});",
    )
    assert not _console_errors(stderr), _console_errors(stderr)
    codes = re.findall(r'<div class="f (?:error|warning|info)" data-code="([^"]+)"', dom)
    assert sorted(codes) == sorted(f["code"] for f in report["findings"])
    # The graph: the backbone's boxes are red, the detach drawn as a red broken edge with its line.
    svg = dom[dom.index('<svg id="autograd-graph"') : dom.index("</svg>", dom.index('<svg id="autograd-graph"'))]
    assert 'class="cut"' in svg and 'stroke="#d32f2f"' in svg
    assert "✂ detach (Tensor.detach) at train.py:15" in svg
    assert 'data-name="backbone.0" data-status="grad_none"' in svg
    assert 'data-name="projector" data-status="learning"' in svg
    # The table filter shows only what it should.
    visible = re.search(r'data-visible="([^"]*)"', dom).group(1).split(",")
    assert sorted(visible) == sorted(p["name"] for p in report["parameters"] if p["status"] == "grad_none")
    shot = tmp_path / "report.png"
    _browser(page, f"--screenshot={shot}", "--window-size=1280,1600")
    assert shot.exists() and shot.stat().st_size > 20_000
    shutil.copy(shot, ROOT / "target" / "report-screenshot.png") if (ROOT / "target").exists() else None


def test_user_text_cannot_inject_markup(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 1)
                    self.register_parameter("<script>alert(1)</script>", nn.Parameter(torch.ones(1)))

                def forward(self, x):
                    return self.fc(x).detach() * 1.0  # </svg><script>alert(2)</script>

            model = Net()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(2):
                x = torch.randn(3, 4)
                loss = (model(x) - 1).pow(2).mean() + model.fc.bias.sum() * 0
                opt.zero_grad()
                loss.backward()
                opt.step()
            """
        )
    )
    page, report = _report(Path("train.py"), tmp_path, tmp_path)
    dom, stderr = _dom(
        page,
        "addEventListener('load',()=>{document.body.dataset.scripts=[...document.scripts].filter(s=>!s.type).length});",
    )
    assert re.search(r'data-scripts="(\d+)"', dom).group(1) == "2"  # ours and the probe: nothing injected
    assert "alert(" not in "".join(re.findall(r"<script>(.*?)</script>", dom, re.S)[:1])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "&lt;/svg&gt;&lt;script&gt;alert(2)" in dom
    assert not _console_errors(stderr)


def test_a_large_graph_collapses_repeated_blocks_and_opens_fast(tmp_path):
    script = tmp_path / "deep.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            import torch.nn as nn

            class Block(nn.Module):
                def __init__(self, d):
                    super().__init__()
                    self.norm = nn.LayerNorm(d)
                    self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

                def forward(self, x):
                    return x + self.ff(self.norm(x))

            class Deep(nn.Module):
                def __init__(self, d=16, n=300):
                    super().__init__()
                    self.embed = nn.Linear(8, d)
                    self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
                    self.head = nn.Linear(d, 1)

                def forward(self, x):
                    h = self.embed(x)
                    for b in self.blocks:
                        h = b(h)
                    return self.head(h)

            model = Deep()
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            for _ in range(2):
                loss = model(torch.randn(4, 8)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """
        )
    )
    page, report = _report(Path("deep.py"), tmp_path, tmp_path)
    dom, stderr = _dom(
        page,
        "window.addEventListener('load',()=>{document.body.dataset.loaded=performance.now()});",
    )
    names = re.findall(r'<g class="cluster" data-name="([^"]+)"', dom)
    assert "blocks.0–299 ×300" in names, names
    assert len(names) <= 6
    nodes = int(re.search(r"(\d+) autograd nodes in", dom).group(1))
    assert nodes > 3000
    loaded = float(re.search(r'data-loaded="([\d.]+)"', dom).group(1))
    assert loaded < 2000, loaded
    assert not _console_errors(stderr)


@pytest.mark.parametrize("fmt", ["dot"])
def test_dot_output(tmp_path, fmt):
    out = tmp_path / "graph.dot"
    run_gradsleuth("run", "--format", fmt, "--out", out, "train.py", cwd=CASES / "detach_projector_input")
    text = out.read_text()
    assert text.startswith("digraph autograd {") and "subgraph cluster_" in text
    assert 'color=red, style=dashed, label="detach at train.py:15"' in text


def test_jupyter_repr_and_text_sparkline():
    import gradsleuth
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    report = gradsleuth.diagnose(model, (torch.randn(8, 4), torch.randint(0, 2, (8,))), F.cross_entropy, opt, steps=3)
    page = report._repr_html_()
    assert page.startswith("<!doctype html>") and '<svg id="autograd-graph"' in page
    text = str(report)
    assert "gradient flow" in text and re.search(r"^\s+0\s+[▁▂▃▄▅▆▇█]{3}$", text, re.M), text
