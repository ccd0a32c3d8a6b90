"""`gradsleuth lint` as users meet it: on the case corpus (every statically visible bug found at
the line the runtime reports, no control flagged, the runtime naming the rule), on real code
nobody here wrote (torch's and torchvision's sources: quiet), and its options: formats,
`# noqa`, selection, pyproject configuration, fixes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, code_in_fix, parses, report_of, run_gradsleuth

CASES = ROOT / "tests" / "cases"

# (case, category, line): the bugs visible without running, at the runtime's line.
STATIC = {
    ("unregistered_list_heads", "unregistered", 24),
    ("unregistered_tuple_stages", "unregistered", 19),
    ("unregistered_dict_experts", "unregistered", 15),
    ("unregistered_tensor_temperature", "unregistered", 23),
    ("non_leaf_double_temperature", "non_leaf_param", 12),
    ("non_leaf_scaled_pos_emb", "non_leaf_param", 11),
    ("buffer_param_prompt", "buffer_not_param", 12),
    ("buffer_requires_grad_gate", "buffer_not_param", 9),
    ("recreated_lazy_proj", "recreated_weights", 14),
    ("recreated_linear_in_forward", "recreated_weights", 15),
    ("data_attr_residual", "data_attr", 13),
    ("data_attr_feature_norm", "data_attr", 26),
    ("detach_in_loss_helper", "detach", 20),
    ("detach_in_loss_helper", "detach", 26),
    ("detach_projector_input", "detach", 15),
    ("no_grad_text_encoder", "no_grad", 13),
    ("no_grad_decorated_helper", "no_grad", 15),
    ("error_element0_no_grad_loss", "no_grad", 7),
    ("rewrap_as_tensor_features", "rewrap", 13),
    ("numpy_roundtrip_item_list", "numpy_roundtrip", 17),
    ("rewrap_torch_tensor_stack", "numpy_roundtrip", 22),
    ("loss_rewrap_item", "loss_rewrap", 9),
    ("loss_rewrap_item", "non_differentiable", 7),
    ("numpy_roundtrip_numpy_metric", "loss_rewrap", 29),
    ("inplace_leaf_manual_init", "inplace_leaf", 19),
    ("inplace_saved_relu_residual", "inplace_saved", 15),
    ("inplace_saved_sigmoid_mask", "inplace_saved", 15),
    ("zero_grad_accumulation", "zero_grad_order", 28),
    ("zero_grad_after_backward", "zero_grad_order", 16),
    ("grad_hook_zeroing", "grad_hook", 11),
    ("optimizer_missing_adapter_added", "optimizer_missing", 29),
    ("optimizer_missing_neck", "optimizer_missing", 31),
    ("optimizer_missing_zero_init_head", "optimizer_missing", 22),
    ("optimizer_missing_layers_called_directly", "optimizer_missing", 20),
    ("optimizer_stale_finetune", "optimizer_stale", 26),
    ("optimizer_stale_trains_ema_copy", "optimizer_stale", 14),
    ("unregistered_parameter_list", "unregistered", 12),
}


def _lint_json(*args, cwd=None):
    proc = run_gradsleuth("lint", "--isolated", "--format", "json", *args, cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr
    return proc, report_of(proc.stdout)


def test_lint_agrees_with_the_runtime_on_static_bugs():
    proc, report = _lint_json(CASES)
    assert proc.returncode == 1, proc.stderr
    assert report["command"] == "lint"
    found = {
        (f["location"]["file"].split("/cases/")[-1].split("/")[0], f["category"], f["location"]["line"])
        for f in report["findings"]
    }
    missing = STATIC - found
    assert not missing, missing
    flagged_controls = {c for c, _, _ in found if c.startswith("control_")}
    assert not flagged_controls, flagged_controls
    # Every fix shown is Python a user can paste.
    broken = [
        (f["code"], code) for f in report["findings"] for code in code_in_fix(f.get("fix") or "") if not parses(code)
    ]
    assert not broken, broken
    # Exact ranges for editors.
    for f in report["findings"]:
        loc = f["location"]
        assert loc["column"] >= 1 and loc["end_line"] >= loc["line"], f


def _respelled(src: str) -> dict[str, str]:
    """The script with torch named through other imports, each as users write it: functions
    imported by name (`from torch import no_grad, tensor`), layers and optimizers by name
    (`from torch.nn import Linear`, `from torch.optim import AdamW`), torch under an alias
    (`import torch as th`). A name the script also uses for something else is not imported."""
    lines = src.split("\n")
    out = {}
    top = next((i for i, line in enumerate(lines) if line == "import torch"), None)
    if top is None:
        return out

    def free(name):  # not used bare anywhere in the original
        return not re.search(rf"(?<![\w.]){name}\b", src)

    funcs = sorted(n for n in set(re.findall(r"(?<![\w.])torch\.([a-z_]\w*)\(", src)) if free(n))
    layers = sorted(n for n in set(re.findall(r"(?<![\w.])nn\.([A-Z]\w*)\(", src)) if free(n))
    optims = sorted(n for n in set(re.findall(r"(?<![\w.])torch\.optim\.([A-Z]\w*)\(", src)) if free(n))
    if funcs or layers or optims:
        new = src
        for names, prefix in ((funcs, r"torch\."), (layers, r"nn\."), (optims, r"torch\.optim\.")):
            if names:
                new = re.sub(rf"(?<![\w.]){prefix}({'|'.join(names)})\(", r"\1(", new)
        imports = [f"from torch import {', '.join(funcs)}"] if funcs else []
        imports += [f"from torch.nn import {', '.join(layers)}"] if layers else []
        imports += [f"from torch.optim import {', '.join(optims)}"] if optims else []
        respelled = new.split("\n")
        respelled[top] += "; " + "; ".join(imports)  # on the same line: line numbers kept
        out["by name"] = "\n".join(respelled)
    if free("th"):
        aliased = re.sub(r"(?<![\w.])torch\.", "th.", src)
        aliased = re.sub(r"^import torch$", "import torch as th", aliased, flags=re.M)
        out["aliased"] = re.sub(r"^(import|from) th\.", r"\1 torch.", aliased, flags=re.M)
    return out


def test_lint_reads_torch_however_it_is_imported(tmp_path):
    """Every script of the case corpus, with torch imported by name or under an alias, gets
    the same findings at the same lines: no bug missed, no false alarm (a `with no_grad():`
    evaluation block read as one)."""
    originals = {}
    variants = 0
    for case in sorted(CASES.iterdir()):
        script = case / "train.py"
        if not script.exists():
            continue
        src = script.read_text()
        for style, text in _respelled(src).items():
            d = tmp_path / style.replace(" ", "_") / case.name
            d.mkdir(parents=True)
            (d / "train.py").write_text(text)
            originals[case.name] = src
            variants += 1
    assert variants > 200, variants

    def found(root):
        _, report = _lint_json(root)
        return {
            (f["location"]["file"].replace("\\", "/").split("/")[-2], f["code"], f["location"]["line"])
            for f in report["findings"]
        }

    want = {f for f in found(CASES) if f[0] in originals}
    for style in ("by_name", "aliased"):
        d = tmp_path / style
        got = found(d)
        cases = {p.name for p in d.iterdir()}
        assert got == {f for f in want if f[0] in cases}, (style, got ^ {f for f in want if f[0] in cases})


def _loop_moved(src: str, shape: str) -> tuple[str, int, int] | None:
    """The script with its training loop (from its first top-level loop to the end) moved, as
    scripts write it, into:

    - `params`: `def run_training_loop(<the names it reads>):`, called with those names
      (`def train(model, optimizer, loader)`);
    - `globals`: `def run_training_loop():` reading the module's names (a `global` line for
      those it rebinds), called as `run_training_loop()`;
    - `trainer`: `class Trainer:` whose `__init__` keeps the names it reads (`self.model =
      model`) and whose `fit(self)` runs the loop on `self.<name>`, run as
      `Trainer(<names>).fit()`.

    Returns the text, the line the moved code started at and how far it moved down. None where
    the loop is not last, or rebinds a name a function above reads."""
    import ast

    body = ast.parse(src).body
    loop = next((i for i, s in enumerate(body) if isinstance(s, (ast.For, ast.While))), None)
    if loop is None:
        return None
    rest = body[loop:]
    nodes = [n for s in rest for n in ast.walk(s)]
    if any(isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Global)) for n in nodes):
        return None
    names = [n for s in body[:loop] for n in ast.walk(s) if isinstance(n, ast.Name)]
    before = {n.id for n in names if isinstance(n.ctx, ast.Store)}
    loads = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    stores = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    free = set()
    for s in body[:loop]:
        for fn in ast.walk(s):
            if isinstance(fn, (ast.FunctionDef, ast.Lambda)):
                own = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
                own |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                free |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - own
    if stores & free:
        return None
    read = sorted((loads & before) - stores)
    params = ", ".join(read)
    start = rest[0].lineno
    lines = src.split("\n")
    indent = "    "
    if shape == "params":
        head, tail = [f"def run_training_loop({params}):"], f"run_training_loop({params})"
    elif shape == "globals":
        rebound = sorted(stores & before)
        head = ["def run_training_loop():", *([f"    global {', '.join(rebound)}"] if rebound else [])]
        tail = "run_training_loop()"
    else:
        if not read or any(isinstance(n, (ast.JoinedStr, ast.Lambda, ast.comprehension)) for n in nodes):
            return None
        indent = "        "
        edits: dict[int, list[int]] = {}
        for n in nodes:
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in read:
                edits.setdefault(n.lineno - 1, []).append(n.col_offset)
        for i, cols in edits.items():
            line = lines[i].encode()
            for c in sorted(cols, reverse=True):
                line = line[:c] + b"self." + line[c:]
            lines[i] = line.decode()
        keep = "; ".join(f"self.{n} = {n}" for n in read)
        head = ["class Trainer:", f"    def __init__(self, {params}):", f"        {keep}", "    def fit(self):"]
        tail = f"Trainer({params}).fit()"
    moved = [indent + line if line.strip() else line for line in lines[start - 1 :]]
    text = "\n".join([*lines[: start - 1], *head, *moved, "", tail, ""])
    return text, start, len(head)


@pytest.mark.parametrize("shape", ["params", "globals", "trainer"])
def test_lint_reads_a_loop_moved_into_a_function_or_a_trainer(tmp_path, shape):
    """Every script of the case corpus with its loop moved into a function (called with the
    model, optimizer and values it reads, or reading them as globals) or into a trainer class of
    its own gets the same findings at the same lines: a model built under `inference_mode`
    handed in, a clipping bound of 0 passed, a graph computed before the loop (GS324), the EMA
    copy trained in place of the model the optimizer holds (GS331)."""
    moves = {}
    for case in sorted(CASES.iterdir()):
        script = case / "train.py"
        moved = _loop_moved(script.read_text(), shape) if script.exists() else None
        if moved is None:
            continue
        d = tmp_path / case.name
        shutil.copytree(case, d)
        (d / "train.py").write_text(moved[0])
        moves[case.name] = moved[1:]
    assert len(moves) >= 40, len(moves)

    def found(root, shift):
        _, report = _lint_json(root)
        out = set()
        for f in report["findings"]:
            case = f["location"]["file"].replace("\\", "/").split("/")[-2]
            if case in moves:
                line = f["location"]["line"]
                start, by = moves[case]
                moved = shift and f["location"]["file"].endswith("train.py") and line >= start
                out.add((case, f["code"], line + by if moved else line))
        return out

    want, got = found(CASES, True), found(tmp_path, False)
    assert want == got, want ^ got


def test_the_runtime_names_the_lint_rule_that_catches_it(results):
    """A runtime finding for a statically visible bug says which lint rule would have caught it."""
    named = 0
    for case, (_expected, _proc, report) in results.items():
        for name, category, line in STATIC:
            if case.name != name or report is None:
                continue
            for f in report["findings"]:
                if f["category"] == category and (f.get("location") or {}).get("line") == line:
                    notes = [r["message"] for r in f.get("related", [])]
                    assert any("gradsleuth lint" in n and "GS3" in n for n in notes), (name, f)
                    named += 1
    assert named >= 25, named


def test_lint_survives_bad_files(tmp_path):
    (tmp_path / "ok.py").write_text("import torch\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\nx = 1\n")
    (tmp_path / "deep.py").write_text("x = " + "(" * 1000 + "1" + ")" * 1000 + "\n")
    (tmp_path / "loop").symlink_to(tmp_path)
    proc = run_gradsleuth("lint", "--format", "json", tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert "panicked" not in proc.stderr
    report = report_of(proc.stdout)
    unchecked = {f["location"]["file"].rsplit("/", 1)[-1] for f in report["findings"] if f["code"] == "GS300"}
    assert {"broken.py", "latin1.py"} <= unchecked


def _torchvision_sources(tmp_path: Path) -> Path:
    wheels = sorted((ROOT / ".cache" / "wheels").glob("torchvision-*.whl"))
    assert wheels, "torchvision's wheel is fetched by `make test` into .cache/wheels (run it)"
    dest = tmp_path / "torchvision_src"
    with zipfile.ZipFile(wheels[-1]) as z:
        for n in z.namelist():
            if n.endswith(".py"):
                z.extract(n, dest)
    return dest


def test_real_code_is_quiet(tmp_path):
    """torch's installed sources and torchvision's: mature code, 0 findings from every rule."""
    import importlib.util

    torch_dir = Path(importlib.util.find_spec("torch").origin).parent
    for path in (torch_dir, _torchvision_sources(tmp_path)):
        proc, report = _lint_json(path)
        per_rule = {}
        for f in report["findings"]:
            per_rule[f["code"]] = per_rule.get(f["code"], 0) + 1
        assert per_rule == {}, (path, per_rule, json.dumps(report["findings"][:5], indent=1))
        assert "checked" in proc.stderr


def test_installed_frameworks_are_quiet():
    """The frameworks people train with, as installed by `make test`: timm's models (whose
    re-parameterisation `detach_()`es the branches it drops), accelerate (conversion helpers
    another file calls under `no_grad`), Lightning, and PEFT's adapter layers (merging into
    and unmerging from frozen base weights through `.data`). PEFT's HRA layer alone still reads
    its frozen base weight through `.data` in a computation, which lint cannot tell from a cut."""
    import importlib.util

    for package in ("timm", "accelerate", "lightning", "peft"):
        path = Path(importlib.util.find_spec(package).origin).parent
        proc, report = _lint_json(path)
        found = [(f["code"], Path(f["location"]["file"]).parent.name) for f in report["findings"]]
        allowed = [("GS306", "hra")] * 3 if package == "peft" else []
        assert sorted(found) == allowed, (package, json.dumps(report["findings"][:5], indent=1))
        assert "checked" in proc.stderr


def test_transformers_models_read_as_their_authors_meant():
    """transformers' own model code, as installed: shapes that are right by design stay quiet
    (a router's bias built with `requires_grad=False`; a sparse-attention indexer whose `forward`,
    under `@torch.no_grad()`, returns only top-k indices; a softmax's output rebound to `topk`'s
    values before an in-place division; a `@staticmethod` called through `self`; a padding layer
    and a loss module built in `forward`; Reformer's reversible layers, run under `no_grad` and
    recomputed in a backward pass of their own; the cuts inside an inference-only `forward`
    whose decorator already says it; RF-DETR's encoder class head, used by its encoder only to
    pick proposals by `topk` and by the detection model for its loss), while the real defects
    next to them are still told: Doge divides its softmax output in place (backward raises),
    LayoutLMv3 reads its relative position biases under `no_grad`, OneFormer keeps its input
    projections in a plain list."""
    import importlib.util

    models = Path(importlib.util.find_spec("transformers").origin).parent / "models"
    proc, report = _lint_json(models)
    found = {(f["code"], Path(f["location"]["file"]).parent.name) for f in report["findings"]}
    quiet = [
        ("GS314", "laguna"),  # e_score_correction_bias = nn.Parameter(..., requires_grad=False)
        ("GS314", "afmoe"),
        ("GS314", "ernie4_5_moe"),  # a statics module whose only parameter is frozen
        ("GS314", "deepseek_v32"),  # the indexer returns topk(...).indices
        ("GS304", "deepseek_v32"),
        ("GS314", "deepseek_v4"),  # torch.where(invalid, full_like(idx, -1), idx)
        ("GS314", "emu3"),  # a VQ encoder returning argmin's codes
        ("GS321", "hunyuan_v1_moe"),
        ("GS317", "siglip2"),
        ("GS305", "canine"),  # nn.ConstantPad1d
        ("GS305", "speecht5"),  # L1Loss + BCEWithLogitsLoss + a loss class of the file
        ("GS319", "reformer"),
        ("GS314", "sam2_video"),  # comparisons inside a `@torch.inference_mode()` forward
        ("GS314", "rf_detr"),  # topk over a class head the detection model runs for its loss
    ]
    assert not [q for q in quiet if q in found], sorted(found)
    told = [("GS321", "doge"), ("GS319", "layoutlmv3"), ("GS301", "oneformer")]
    assert all(t in found for t in told), sorted(found)
    # One finding per cause: a `@torch.no_grad()` forward is GS304's alone.
    lines = {}
    for f in report["findings"]:
        lines.setdefault((f["location"]["file"], f["location"]["line"]), set()).add(f["code"])
    assert not [k for k, codes in lines.items() if {"GS304", "GS319"} <= codes]


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    (proj / "models").mkdir(parents=True)
    shutil.copy(CASES / "unregistered_list_heads" / "train.py", proj / "models" / "tagger.py")
    shutil.copy(CASES / "detach_projector_input" / "train.py", proj / "embed.py")
    return proj


def test_sarif_and_github_formats(tmp_path):
    proj = _project(tmp_path)
    proc = run_gradsleuth("lint", "--isolated", "--format", "sarif", ".", cwd=proj)
    assert proc.returncode == 1, proc.stderr
    sarif = json.loads(proc.stdout)
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert len(rule_ids) >= 20 and "GS316" in rule_ids
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert set(by_rule) == {"GS301", "GS316"}
    loc = by_rule["GS301"]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "models/tagger.py"
    assert loc["region"]["startLine"] == 24
    assert rule_ids[by_rule["GS316"]["ruleIndex"]] == "GS316"

    proc = run_gradsleuth("lint", "--isolated", "--format", "github", ".", cwd=proj)
    lines = proc.stdout.splitlines()
    assert any(
        line.startswith("::error file=./models/tagger.py,line=24,") and "title=gradsleuth GS301::" in line
        for line in lines
    ), lines


def test_noqa_select_ignore_and_statistics(tmp_path):
    proj = _project(tmp_path)
    proc = run_gradsleuth("lint", "--isolated", "--statistics", ".", cwd=proj)
    assert proc.returncode == 1
    assert [line.split() for line in proc.stdout.splitlines()] == [
        ["1", "GS301", "unregistered-modules"],
        ["1", "GS316", "detach-cuts-module"],
    ]
    _, report = _lint_json("--select", "detach", ".", cwd=proj)
    assert {f["code"] for f in report["findings"]} == {"GS316"}
    proc, report = _lint_json("--ignore", "GS3", ".", cwd=proj)
    assert report["findings"] == [] and proc.returncode == 0

    tagger = proj / "models" / "tagger.py"
    lines = tagger.read_text().splitlines()
    lines[23] += "  # noqa: GS301 (kept out of the model on purpose)"
    tagger.write_text("\n".join(lines) + "\n")
    _, report = _lint_json(".", cwd=proj)
    assert {f["code"] for f in report["findings"]} == {"GS316"}

    proc = run_gradsleuth("lint", "--isolated", "--select", "GS999,detach", ".", cwd=proj)
    assert proc.returncode == 2 and "unknown rule selector `GS999`" in proc.stderr


def test_pyproject_configuration(tmp_path):
    proj = _project(tmp_path)
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "proj"\n\n[tool.gradsleuth]\nignore = ["GS301"]\nexclude = ["models"]\nfail-on = "never"\n'
    )
    proc = run_gradsleuth("lint", "--format", "json", cwd=proj)
    assert proc.returncode == 0, proc.stderr  # fail-on = never
    report = report_of(proc.stdout)
    assert [f["code"] for f in report["findings"]] == ["GS316"]
    assert all("models" not in f["location"]["file"] for f in report["findings"])
    # Found from a subfolder too; the command line still wins for --fail-on.
    proc = run_gradsleuth("lint", "--fail-on", "error", "..", cwd=proj / "models")
    assert proc.returncode == 1
    (proj / "pyproject.toml").write_text("[tool.gradsleuth]\nignroe = ['GS301']\n")
    proc = run_gradsleuth("lint", cwd=proj)
    assert proc.returncode == 2 and "ignroe" in proc.stderr and "Traceback" not in proc.stderr


MULTI_LINE_LIST = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = [nn.Conv2d(1, 8, 3, 1),
                      nn.Conv2d(8, 16, 3, 1)]
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        for c in self.convs:
            x = F.relu(c(x))
        return self.fc(x.mean((2, 3)))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    F.cross_entropy(model(torch.randn(4, 1, 12, 12)), torch.randint(0, 10, (4,))).backward()
    opt.step()
"""


def test_fix_and_diff_keep_meaning(tmp_path):
    proj = _project(tmp_path)
    shutil.copy(CASES / "unregistered_dict_experts" / "train.py", proj / "moe.py")
    shutil.copy(CASES / "unregistered_tensor_temperature" / "train.py", proj / "clip.py")
    before = {p.name: p.read_text() for p in proj.rglob("*.py")}
    proc = run_gradsleuth("lint", "--isolated", "--diff", ".", cwd=proj)
    assert proc.returncode == 1
    assert "+        self.heads = nn.ModuleList([nn.Linear(32, n) for n in groups])" in proc.stdout
    assert "+        self.experts = nn.ModuleDict({name: mlp(d, 2 * d, 1) for name in names})" in proc.stdout
    assert "+        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))" in proc.stdout
    assert {p.name: p.read_text() for p in proj.rglob("*.py")} == before  # --diff writes nothing

    proc = run_gradsleuth("lint", "--isolated", "--fix", "--format", "json", ".", cwd=proj)
    assert "fixed 3 finding(s) in 3 file(s)" in proc.stderr
    assert {f["code"] for f in report_of(proc.stdout)["findings"]} == {"GS316"}
    # The fixed scripts run and now train every parameter: the runtime agrees.
    for name in ("moe.py", "clip.py"):
        out = tmp_path / f"{name}.json"
        run = run_gradsleuth("run", "--format", "json", "--out", out, name, cwd=proj)
        report = report_of(out.read_text())
        assert [f for f in report["findings"] if f["severity"] == "error"] == [], (name, run.stderr[-2000:])
    # A list written one layer per line is wrapped whole, and the fixed script trains it.
    (proj / "convs.py").write_text(MULTI_LINE_LIST)
    proc = run_gradsleuth("lint", "--isolated", "--fix", "convs.py", cwd=proj)
    assert "fixed 1 finding(s) in 1 file(s)" in proc.stderr, proc.stderr
    out = tmp_path / "convs.json"
    run = run_gradsleuth("run", "--format", "json", "--out", out, "convs.py", cwd=proj)
    assert out.exists(), run.stderr[-3000:]
    assert [f for f in report_of(out.read_text())["findings"] if f["severity"] == "error"] == []


def test_lint_does_not_import_torch(tmp_path):
    """lint is Rust through and through: the command never loads torch."""
    script = (
        "import sys, runpy\n"
        "sys.argv = ['gradsleuth', 'lint', '--isolated', sys.argv[1]]\n"
        "from gradsleuth._core import cli_main\n"
        "code = cli_main(sys.argv)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "sys.exit(0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(CASES / "detach_projector_input")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("code", ["GS316", "GS322", "GS321"])
def test_list_rules_documents_every_rule(code):
    proc = run_gradsleuth("lint", "--list-rules")
    assert proc.returncode == 0
    block = proc.stdout.split(code, 1)[1].split("\nGS", 1)[0]
    assert len(block) > 200 and ("Legitimate" in block or "legitimate" in block or "fine" in block)
