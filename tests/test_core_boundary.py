"""The Python/Rust boundary: `_core.pyi` describes the compiled module exactly, the Python
package's modules import each other without a cycle, and `Report` is the Rust class."""

from __future__ import annotations

import ast
from pathlib import Path

import gradsleuth
from conftest import ROOT, report_of
from gradsleuth import _core

PKG = ROOT / "python" / "gradsleuth"


def _stub():
    tree = ast.parse((PKG / "_core.pyi").read_text())
    names, classes = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            classes[node.name] = members
            names.add(node.name)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names, classes


def test_the_stub_lists_exactly_what_the_module_has():
    names, classes = _stub()
    public = {n for n in dir(_core) if not n.startswith("_") or n == "__version__"}
    assert public - names == set(), f"in _core but not in the stub: {sorted(public - names)}"
    aliases = {"Loc", "Phase", "BackwardKind", "ZeroGradTarget", "TracerCut"}
    assert names - public - aliases == set(), f"in the stub but not in _core: {sorted(names - public)}"
    for cls, members in classes.items():
        real = {n for n in dir(getattr(_core, cls)) if not n.startswith("__")}
        stubbed = {m for m in members if not m.startswith("__")}  # dunders: protocol, not surface
        assert real - stubbed == set(), f"{cls}: not in the stub: {sorted(real - stubbed)}"
        assert stubbed - real == set(), f"{cls}: stubbed but missing: {sorted(stubbed - real)}"


def test_the_package_is_typed():
    assert (PKG / "py.typed").exists()


def _imports(path: Path) -> set[str]:
    """gradsleuth modules a file imports (at any depth: lazy imports count too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gradsleuth"):
            mod = node.module
            if mod == "gradsleuth":
                out |= {f"gradsleuth.{a.name}" for a in node.names}
            else:
                out.add(mod)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("gradsleuth.")}
    return out


def test_the_python_modules_import_each_other_without_a_cycle():
    graph = {f"gradsleuth.{p.stem}": _imports(p) for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__")}
    graph = {k: {v for v in vs if v in graph and v != k} for k, vs in graph.items()}
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join([*path, node, nxt])
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_report_is_the_rust_class_and_reads_back_its_json(tmp_path):
    assert gradsleuth.Report is _core.Report
    rec = _core.Recorder("diagnose", 1)
    rec.module(key=1, class_="Net", root=None, name="model", parent=None, attr="", kind=_core.ModuleKind.ROOT)
    rec.tensor(
        key=2,
        name="fc.weight",
        kind=_core.TensorKind.PARAM,
        module=1,
        attr="weight",
        shape=[2, 2],
        dtype="float32",
        requires_grad=True,
        is_leaf=True,
        is_parameter=True,
    )
    report = rec.report()
    data = report_of(report.to_json())
    again = _core.Report.from_json(report.to_json())
    assert again.to_json() == report.to_json()
    assert report.findings == data["findings"] and report.parameters == data["parameters"]
    assert report.to_dict() == data
    report.save_capture(str(tmp_path / "cap.json"))
    assert (tmp_path / "cap.json").read_text().startswith("{")
    assert "finding" in repr(report)


def test_closed_sets_refuse_unknown_names():
    rec = _core.Recorder("run", 1)
    for call in (
        lambda: rec.progress(1, "sideways"),
        lambda: rec.backward_begin("forward", (None, None, None), None),
        lambda: rec.zero_grad("scheduler", 1, (None, None, None)),
        lambda: rec.add_cut(kind="teleport", op="op", site=(None, None, None), params=[]),
    ):
        try:
            call()
        except ValueError as e:
            assert "unknown" in str(e)
        else:
            raise AssertionError("accepted an unknown name")
