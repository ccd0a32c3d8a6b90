"""Mutation operators: one per way a gradient silently dies, applied at every site where it means something.

An operator looks at a Python file's AST (and at which of its lines ran in the original, so
mutations land where code runs), lists its sites, and applies one site as a text edit that
keeps the rest of the file as it was (comments, layout, line numbers outside the edit). Each
mutant knows the category a correct diagnosis names and the line(s) where the fix belongs (the
lines of the edit, in the mutated file). Which parameters it breaks is not decided here: the
oracle measures it.

Operators on *code* (forward methods, helpers, loss functions: any function but `__init__`)
insert one statement after an assignment `name = <expr>` that ran; operators on *construction*
edit `__init__`; operators on the *loop* edit the training loop's statements.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass, field


@dataclass
class Mutant:
    operator: str
    category: str
    file: str  # the file edited (its base name in the mutant's folder)
    source: str  # the mutated file
    lines: list[int]  # where the fix belongs, in the mutated file
    site: str  # a short description of where
    expect_error: bool = False
    related: list[int] = field(default_factory=list)


@dataclass
class Operator:
    name: str
    category: str
    kind: str  # "code", "init", "loop"
    expect_error: bool = False
    static: bool = True  # visible to lint without running
    # What torch says when the bug raises, or any of several messages (a mutant raising anything
    # else failed for another reason and is dropped).
    error: str | tuple[str, ...] | None = None


# What torch says when a cut takes every path from the parameters to the loss: backward
# refuses a loss with no history. That is the bug itself, in the form users meet it most (the
# error, then the hunt for the cut), not an unrelated failure: such a mutant is scored, the
# finding must name the cut's category at its line.
_WHOLE_PATH_CUT = "does not require grad"

OPERATORS = {
    o.name: o
    for o in [
        Operator("detach", "detach", "code", error=_WHOLE_PATH_CUT),
        Operator("data", "data_attr", "code", error=_WHOLE_PATH_CUT),
        Operator("no_grad", "no_grad", "code", error=_WHOLE_PATH_CUT),
        # Every way torch refuses an inference tensor later (saved for backward; updated in
        # place outside the mode, as a buffer or a view), or the whole path cut.
        Operator(
            "inference_mode",
            "no_grad",
            "code",
            expect_error=True,
            error=(
                "Inference tensors",
                "inference tensor outside InferenceMode",
                "created in inference mode",
                _WHOLE_PATH_CUT,
            ),
        ),
        Operator("set_grad_enabled", "no_grad", "code", error=_WHOLE_PATH_CUT),
        # A value drawn with `Distribution.sample()` (meant: `rsample()`): torch turns
        # recording off inside the call; lint cannot tell a REINFORCE draw from this.
        Operator("sample", "no_grad", "code", static=False, error=_WHOLE_PATH_CUT),
        Operator("detach_inplace", "detach", "code", error=_WHOLE_PATH_CUT),
        # A fresh leaf where the value was (`x.detach().requires_grad_()`, as code that wants
        # a gradient *at* x writes): x still requires grad, nothing before it gets any.
        Operator("detach_leaf", "detach", "code", error=_WHOLE_PATH_CUT),
        # A function that runs in the forward or the loss decorated `@torch.no_grad()`: the
        # whole body is unrecorded, wherever it is called from.
        Operator("no_grad_decorator", "no_grad", "code", error=_WHOLE_PATH_CUT),
        Operator("rewrap", "rewrap", "code", error=_WHOLE_PATH_CUT),
        Operator("new_tensor", "rewrap", "code", error=_WHOLE_PATH_CUT),
        Operator("tolist", "numpy_roundtrip", "code", error=_WHOLE_PATH_CUT),
        # `torch.Tensor(list)` is no torch function: the op log sees the numbers leave, not
        # the tensor they are rebuilt into.
        Operator("legacy_ctor", "numpy_roundtrip", "code", error=_WHOLE_PATH_CUT),
        Operator("numpy", "numpy_roundtrip", "code", error=_WHOLE_PATH_CUT),
        Operator("round", "non_differentiable", "code", static=False, error=_WHOLE_PATH_CUT),
        Operator("argmax", "non_differentiable", "code", static=False, error=_WHOLE_PATH_CUT),
        Operator("int_cast", "non_differentiable", "code", static=False, error=_WHOLE_PATH_CUT),
        Operator("unused_output", "unused", "code", static=False),
        # A layer run under reentrant activation checkpointing (`use_reentrant=True`, the
        # default before torch 2.4) on an input that does not require grad: the checkpoint's
        # output does not either, and the layer's weights get no gradient (the LoRA /
        # frozen-embedding trap). Whether the input requires grad is known only at run time.
        Operator("checkpoint_reentrant", "no_grad", "code", static=False, error=_WHOLE_PATH_CUT),
        Operator(
            "inplace_saved", "inplace_saved", "code", expect_error=True, static=False, error="modified by an inplace"
        ),
        Operator("module_list", "unregistered", "init"),
        Operator("param_buffer", "buffer_not_param", "init"),
        Operator("plain_buffer", "buffer_not_param", "init", static=False),
        Operator("non_leaf", "non_leaf_param", "init"),
        Operator("module_in_forward", "recreated_weights", "init"),
        Operator("optimizer_subset", "optimizer_missing", "loop"),
        Operator("optimizer_before_replace", "optimizer_stale", "loop"),
        Operator("zero_grad_order", "zero_grad_order", "loop"),
        # The same bug written by hand: each gradient cleared after backward (`p.grad = None`,
        # or zeroed through its `.data` view, as pre-0.4 code did).
        Operator("grad_cleared", "zero_grad_order", "loop"),
        Operator("clip_zero", "grad_clip", "loop"),
        Operator("hook_zero", "grad_hook", "loop"),
        # Which names a filter matches is known only from the model's parameter names (a
        # library model's, built at run time): lint cannot see that a filter froze too much.
        Operator("freeze_filter", "frozen", "loop", static=False, error="does not require grad"),
        Operator("loss_rewrap", "loss_rewrap", "loop"),
        Operator("stale_tensor", "stale_tensor", "loop", expect_error=True, error="a second time"),
        Operator("inplace_leaf", "inplace_leaf", "loop", expect_error=True, error="leaf Variable that requires grad"),
        Operator("create_graph", "create_graph", "loop", expect_error=True, error="does not require grad"),
    ]
}


# -- text edits -----------------------------------------------------------------------------


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _insert_after(lines: list[str], stmt: ast.stmt, new: list[str]) -> tuple[str, list[int]]:
    """Inserts `new` (statements, relative indentation kept) after `stmt`; returns the source
    and the 1-based numbers of the inserted lines."""
    ind = _indent(lines[stmt.lineno - 1])
    at = stmt.end_lineno or stmt.lineno
    out = lines[:at] + [ind + n + "\n" for n in new] + lines[at:]
    return "".join(out), list(range(at + 1, at + 1 + len(new)))


def _insert_before(lines: list[str], stmt: ast.stmt, new: list[str]) -> tuple[str, list[int]]:
    ind = _indent(lines[stmt.lineno - 1])
    at = stmt.lineno - 1
    out = lines[:at] + [ind + n + "\n" for n in new] + lines[at:]
    return "".join(out), list(range(at + 1, at + 1 + len(new)))


def _wrap_block(lines: list[str], stmt: ast.stmt, header: str) -> tuple[str, list[int]]:
    """`header:` above `stmt`, the statement indented into it; the lines of both."""
    ind = _indent(lines[stmt.lineno - 1])
    a, b = stmt.lineno - 1, stmt.end_lineno or stmt.lineno
    body = ["    " + ln if ln.strip() else ln for ln in lines[a:b]]
    out = lines[:a] + [ind + header + "\n"] + body + lines[b:]
    return "".join(out), list(range(a + 1, b + 2))


def _replace_segment(source: str, node: ast.AST, text: str) -> str:
    lines = source.splitlines(keepends=True)
    start = sum(len(ln) for ln in lines[: node.lineno - 1]) + _col(lines[node.lineno - 1], node.col_offset)
    end_line = node.end_lineno or node.lineno
    end = sum(len(ln) for ln in lines[: end_line - 1]) + _col(lines[end_line - 1], node.end_col_offset or 0)
    return source[:start] + text + source[end:]


def _col(line: str, byte_col: int) -> int:
    return len(line.encode()[:byte_col].decode(errors="ignore"))


# -- sites ----------------------------------------------------------------------------------


def _functions(tree):
    """(function, enclosing class or None) for every function, methods included."""
    out = []

    def visit(node, cls):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((child, cls))
                visit(child, cls)
            else:
                visit(child, cls)

    visit(tree, None)
    return out


def _statements(body):
    for s in body:
        yield s
        if isinstance(s, ast.ClassDef) and any(
            isinstance(f, ast.FunctionDef) and f.name == "training_step" for f in s.body
        ):
            # A LightningModule: its methods are the training loop (the optimizer is made in
            # `configure_optimizers`, the loss in `training_step`).
            for f in s.body:
                if isinstance(f, ast.FunctionDef):
                    yield from _statements(f.body)
            continue
        for name in ("body", "orelse", "finalbody"):
            sub = getattr(s, name, None)
            if isinstance(sub, list) and not isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                yield from _statements(sub)
        for h in getattr(s, "handlers", []) or []:
            yield from _statements(h.body)


_NOT_TENSOR_CALLS = {
    "len",
    "range",
    "int",
    "float",
    "bool",
    "str",
    "isinstance",
    "getattr",
    "tuple",
    "list",
    "dict",
    "zip",
    "enumerate",
    "super",
    "min",
    "max",
    "type",
    "all",
    "any",
    "size",
    "dim",
    "shape",
    "numel",
    "item",
    "get_extended_attention_mask",
    "split",
    "chunk",
    "unbind",
    "items",
    "keys",
    "values",
    "get",
    "format",
    "is_floating_point",
    "get_seq_length",
    "get_usable_length",
}


def _path(name: str) -> str:
    """`model` followed by the Python that reaches the submodule `named_modules()` calls
    `name`: `layers.1.self_attn` is `model.layers[1].self_attn` (a list's index is not an
    attribute), a key that is no identifier is `["key"]` (a `ModuleDict`'s)."""
    out = "model"
    for part in name.split("."):
        if part.isdigit():
            out += f"[{part}]"
        elif part.isidentifier() and not keyword.iskeyword(part):
            out += f".{part}"
        else:
            out += f"[{part!r}]"
    return out


def _call_name(node):
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute):
            return f.attr
        if isinstance(f, ast.Name):
            return f.id
    return None


def _tensorish(value: ast.expr) -> bool:
    """Could plausibly be one tensor (the oracle drops the mutants where it was not)."""
    if isinstance(value, ast.Call):
        name = _call_name(value)
        return name is not None and name not in _NOT_TENSOR_CALLS and not name.startswith("_")
    if isinstance(value, ast.BinOp):
        return _tensorish(value.left) or _tensorish(value.right)
    if isinstance(value, ast.Subscript):
        indexed = isinstance(value.value, (ast.Call, ast.Name, ast.Attribute))
        return indexed and not isinstance(value.slice, ast.Constant)
    return False


def code_sites(tree, covered: set[int]):
    """Assignments `name = <tensor-ish expr>` in functions (not `__init__`) whose line ran."""
    sites = []
    for fn, _cls in _functions(tree):
        if fn.name == "__init__" or fn.name.startswith("_init"):
            continue
        for s in _statements(fn.body):
            if (
                isinstance(s, ast.Assign)
                and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name)
                and s.lineno in covered
                and _tensorish(s.value)
            ):
                sites.append((fn, s))
    return sites


def _first_name_arg(call: ast.expr):
    if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Name):
        return call.args[0].id
    return None


def _is_self_module_call(call: ast.expr) -> str | None:
    """`self.<attr>(...)`: the attribute."""
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
        v = call.func.value
        if isinstance(v, ast.Name) and v.id == "self":
            return call.func.attr
    return None


def apply_code(op: str, source: str, fn, stmt: ast.Assign, file: str, grad_mod: str) -> Mutant | None:
    lines = source.splitlines(keepends=True)
    x = stmt.targets[0].id  # type: ignore[attr-defined]
    o = OPERATORS[op]
    site = f"{fn.name}:{stmt.lineno} {x}"
    T = grad_mod  # how the file names torch

    def after(*new):
        src, ln = _insert_after(lines, stmt, list(new))
        return Mutant(op, o.category, file, src, ln, site, o.expect_error, [stmt.lineno])

    if op == "detach":
        return after(f"{x} = {x}.detach()")
    if op == "data":
        return after(f"{x} = {x}.data")
    if op == "detach_inplace":
        return after(f"{x}.detach_()")
    if op == "detach_leaf":
        return after(f"{x} = {x}.detach().requires_grad_()")
    if op == "no_grad_decorator":
        # Once per function (at its first assignment site), on the `def` line's own
        # decorators, innermost.
        first = next((s for s in _statements(fn.body) if isinstance(s, ast.Assign)), None)
        if first is not stmt or isinstance(fn, ast.AsyncFunctionDef):
            return None
        src, ln = _insert_before(lines, fn, [f"@{T}.no_grad()"])
        return Mutant(op, o.category, file, src, ln, f"{fn.name}:{fn.lineno}", o.expect_error)
    if op == "rewrap":
        return after(f"{x} = {T}.tensor({x})")
    if op == "new_tensor":
        return after(f"{x} = {x}.new_tensor({x})")
    if op == "legacy_ctor":
        return after(f"{x} = {T}.Tensor({x}.tolist()).to({x})")
    if op == "tolist":
        return after(f"{x} = {T}.tensor({x}.tolist(), dtype={x}.dtype, device={x}.device)")
    if op == "numpy":
        return after(f"{x} = {T}.from_numpy({x}.detach().cpu().float().numpy()).to({x}.dtype)")
    if op == "sample":
        return after(f"{x} = {T}.distributions.Normal({x}, 1e-6).sample()")
    if op == "round":
        return after(f"{x} = {x}.round()")
    if op == "argmax":
        return after(
            f"{x} = {T}.nn.functional.one_hot({x}.argmax(-1), {x}.shape[-1]).to({x}.dtype)"
        )
    if op == "int_cast":
        return after(f"{x} = {x}.long().to({x}.dtype)")
    if op in ("no_grad", "inference_mode", "set_grad_enabled"):
        header = {
            "no_grad": f"with {T}.no_grad():",
            "inference_mode": f"with {T}.inference_mode():",
            "set_grad_enabled": f"with {T}.set_grad_enabled(False):",
        }[op]
        src, ln = _wrap_block(lines, stmt, header)
        return Mutant(op, o.category, file, src, ln, site, o.expect_error)
    if op == "unused_output":
        if _is_self_module_call(stmt.value) is None:
            return None
        a = _first_name_arg(stmt.value)
        if a is None or a == x:
            return None
        return after(f"{x} = {a}")
    if op == "checkpoint_reentrant":
        # `x = self.layer(a)` on an argument of the function (a forward's input: where an
        # input that does not require grad comes in), one positional argument, no keywords.
        attr = _is_self_module_call(stmt.value)
        a = _first_name_arg(stmt.value)
        call = stmt.value
        args = {p.arg for p in fn.args.args}
        if attr is None or a is None or a not in args or len(call.args) != 1 or call.keywords:  # type: ignore[attr-defined]
            return None
        if stmt.end_lineno != stmt.lineno:
            return None
        new = f"{x} = {T}.utils.checkpoint.checkpoint(self.{attr}, {a}, use_reentrant=True)"
        return Mutant(op, o.category, file, _replace_stmt(source, stmt, new), [stmt.lineno], site)
    if op == "inplace_saved":
        a = _first_name_arg(stmt.value)
        if a is None or a == x:
            return None
        src, ln = _insert_after(lines, stmt, [f"{a}.mul_(1.0)"])
        return Mutant(op, o.category, file, src, ln + [stmt.lineno], site, True, [stmt.lineno])
    return None


# -- construction ---------------------------------------------------------------------------


def init_sites(tree, covered: set[int], op: str):
    """`__init__` edits: containers, nn.Parameter attributes, Linear layers called in forward."""
    out = []
    for fn, cls in _functions(tree):
        if fn.name != "__init__" or cls is None:
            continue
        if not any(ln in covered for ln in range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)):
            continue
        for s in _statements(fn.body):
            if s.lineno not in covered:
                continue
            if op == "module_list":
                for node in ast.walk(s):
                    if _call_name(node) in ("ModuleList", "ModuleDict", "ParameterList", "ParameterDict"):
                        out.append((cls, s, node))
                        break
            elif op in ("param_buffer", "plain_buffer", "non_leaf"):
                if (
                    isinstance(s, ast.Assign)
                    and len(s.targets) == 1
                    and isinstance(s.targets[0], ast.Attribute)
                    and isinstance(s.targets[0].value, ast.Name)
                    and s.targets[0].value.id == "self"
                    and _call_name(s.value) == "Parameter"
                    and s.value.args  # type: ignore[attr-defined]
                ):
                    out.append((cls, s, s.value))
            elif op == "module_in_forward":
                if (
                    isinstance(s, ast.Assign)
                    and len(s.targets) == 1
                    and isinstance(s.targets[0], ast.Attribute)
                    and isinstance(s.targets[0].value, ast.Name)
                    and s.targets[0].value.id == "self"
                    and _call_name(s.value) == "Linear"
                ):
                    out.append((cls, s, s.value))
    return out


def apply_init(op: str, source: str, cls, stmt, node, file: str, grad_mod: str, covered: set[int]) -> Mutant | None:
    o = OPERATORS[op]
    T = grad_mod
    site = f"{cls.name}.__init__:{stmt.lineno}"
    if op == "module_list":
        repl = {"ModuleList": "list", "ModuleDict": "dict", "ParameterList": "list", "ParameterDict": "dict"}[
            _call_name(node)
        ]
        new = _replace_segment(source, node.func, repl)
        return Mutant(op, o.category, file, new, [node.lineno], site)
    attr = stmt.targets[0].attr
    if op == "param_buffer":
        inner = ast.get_source_segment(source, node)
        new = _replace_stmt(source, stmt, f'self.register_buffer("{attr}", {inner})')
        return Mutant(op, o.category, file, new, [stmt.lineno], site)
    if op == "plain_buffer":
        inner = ast.get_source_segment(source, node.args[0])
        new = _replace_stmt(source, stmt, f'self.register_buffer("{attr}", {inner})')
        return Mutant(op, o.category, file, new, [stmt.lineno], site)
    if op == "non_leaf":
        inner = ast.get_source_segment(source, node)
        new = _replace_segment(source, node, f"{inner} * 1.0")
        return Mutant(op, o.category, file, new, [stmt.lineno], site)
    if op == "module_in_forward":
        # Every call `self.<attr>(` in the class's other methods builds a new Linear instead.
        calls = []
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name != "__init__":
                for n in ast.walk(fn):
                    if _is_self_module_call(n) == attr and n.lineno in covered:
                        calls.append(n.func)
        if not calls:
            return None
        new = source
        for f in sorted(calls, key=lambda n: (n.lineno, n.col_offset), reverse=True):
            new = _replace_segment(
                new, f, f"{T}.nn.Linear(self.{attr}.in_features, self.{attr}.out_features)"
            )
        return Mutant(op, o.category, file, new, sorted({f.lineno for f in calls}), site, related=[stmt.lineno])
    return None


def _replace_stmt(source: str, stmt: ast.stmt, text: str) -> str:
    lines = source.splitlines(keepends=True)
    ind = _indent(lines[stmt.lineno - 1])
    a, b = stmt.lineno - 1, stmt.end_lineno or stmt.lineno
    # Keep the line count: the statement's other lines become blank.
    return "".join(lines[:a] + [ind + text + "\n"] + ["\n"] * (b - a - 1) + lines[b:])


# -- the loop ---------------------------------------------------------------------------------


def _module_assigns(tree, pred):
    return [s for s in _statements(tree.body) if isinstance(s, ast.Assign) and pred(s)]


def _is_optimizer(s: ast.Assign) -> bool:
    v = s.value
    return (
        isinstance(v, ast.Call)
        and isinstance(v.func, ast.Attribute)
        and isinstance(v.func.value, ast.Attribute)
        and v.func.value.attr == "optim"
    )


def loop_sites(tree, op: str, facts: dict):
    """Loop edits; `facts` are what the original's run showed (children with parameters,
    Linear layers by qualified name, the head)."""
    stmts = list(_statements(tree.body))
    opts = _module_assigns(tree, _is_optimizer)
    backward = [
        s
        for s in stmts
        if isinstance(s, ast.Expr) and _call_name(s.value) == "backward" and isinstance(s.value.func, ast.Attribute)
    ]
    loss_lines = [
        s
        for s in stmts
        if isinstance(s, ast.Assign)
        and len(s.targets) == 1
        and isinstance(s.targets[0], ast.Name)
        and s.targets[0].id == "loss"
        and isinstance(s.value, (ast.Call, ast.BinOp))
    ]
    model_line = next(
        (
            s
            for s in stmts
            if isinstance(s, ast.Assign)
            and len(s.targets) == 1
            and isinstance(s.targets[0], ast.Name)
            and s.targets[0].id == "model"
        ),
        None,
    )
    children = facts.get("children", [])
    linears = facts.get("linears", [])
    if op == "optimizer_subset":
        return [
            (s, c)
            for s in opts
            for c in children[:3]
            if "model.parameters()" in (ast.get_source_segment(facts["source"], s) or "")
        ]
    if op == "optimizer_before_replace":
        return [(opts[0], lin) for lin in linears[-2:]] if opts else []
    if op == "zero_grad_order":
        return [(b, opts[0].targets[0].id) for b in backward[:1]] if opts else []  # type: ignore[attr-defined]
    if op == "grad_cleared":
        return [(b, v) for b in backward[:1] for v in ("none", "data_zero")] if model_line else []
    if op == "clip_zero":
        return _module_assigns(
            tree, lambda s: isinstance(s.targets[0], ast.Name) and s.targets[0].id == "max_norm"
        )
    if op == "hook_zero":
        return [(model_line, c, v) for c in children[:2] for v in ("times_zero", "inverted")] if model_line else []
    if op == "freeze_filter":
        return [(model_line, v) for v in ("keep_missing", "head_too")] if model_line else []
    if op == "loss_rewrap":
        return loss_lines[:1]
    if op == "stale_tensor":
        return loss_lines[:1]
    if op == "inplace_leaf":
        return [(loss_lines[0], lin) for lin in linears[:1]] if loss_lines else []
    if op == "create_graph":
        return [
            (n, kw)
            for n in ast.walk(tree)
            if _call_name(n) == "grad"
            for kw in n.keywords  # type: ignore[attr-defined]
            if kw.arg == "create_graph"
        ][:1]
    return []


def apply_loop(op: str, source: str, site, file: str, facts: dict) -> Mutant | None:
    o = OPERATORS[op]
    lines = source.splitlines(keepends=True)

    def mk(src, ln, desc, related=()):
        return Mutant(op, o.category, file, src, ln, desc, o.expect_error, list(related))

    if op == "optimizer_subset":
        s, child = site
        seg = ast.get_source_segment(source, s) or ""
        new = seg.replace("model.parameters()", f"{_path(child)}.parameters()", 1)
        return mk(_replace_stmt(source, s, new.replace("\n", " ")), [s.lineno], f"optimizer over {_path(child)}")
    if op == "optimizer_before_replace":
        s, lin = site
        src, ln = _insert_after(
            lines,
            s,
            [f"{_path(lin)} = torch.nn.Linear({_path(lin)}.in_features, {_path(lin)}.out_features)"],
        )
        return mk(src, ln, f"{_path(lin)} replaced after the optimizer", [s.lineno])
    if op == "zero_grad_order":
        b, opt = site
        src, ln = _insert_after(lines, b, [f"{opt}.zero_grad()"])
        return mk(src, ln, "zero_grad after backward", [b.lineno])
    if op == "grad_cleared":
        b, variant = site
        write = "p.grad = None" if variant == "none" else "if p.grad is not None:\n        p.grad.data.zero_()"
        src, ln = _insert_after(lines, b, ["for p in model.parameters():", *("    " + w for w in write.split("\n"))])
        return mk(src, ln, f"each gradient cleared after backward ({variant})", [b.lineno])
    if op == "clip_zero":
        s = site
        new = _replace_stmt(source, s, "max_norm = 0.0")
        clip = [i + 1 for i, ln in enumerate(new.splitlines()) if "clip_grad_norm_" in ln]
        return mk(new, [s.lineno, *clip], "clip bound 0")
    if op == "hook_zero":
        m, child, variant = site
        hook = (
            "lambda g: g * 0"
            if variant == "times_zero"
            else "lambda g: g if g.abs().max() > 1e6 else torch.zeros_like(g)"
        )
        src, ln = _insert_after(
            lines, m, [f"for p in {_path(child)}.parameters():", f"    p.register_hook({hook})"]
        )
        return mk(src, ln, f"hook on {_path(child)} ({variant})")
    if op == "freeze_filter":
        m, variant = site
        head = facts.get("head")
        if variant == "keep_missing":
            body = [
                'trainable = ("head",)',
                "for n, p in model.named_parameters():",
                "    if not n.startswith(trainable):",
                "        p.requires_grad = False",
            ]
            src, ln = _insert_after(lines, m, body)
            return Mutant(op, o.category, file, src, ln, "filter keeps nothing", True)
        if not head:
            return None
        body = [
            "for n, p in model.named_parameters():",
            f'    if not n.startswith("{facts["children"][0]}") or "{head}" in n:',
            "        p.requires_grad = False",
        ]
        src, ln = _insert_after(lines, m, body)
        return mk(src, ln, f"filter freezes {head} too")
    if op == "loss_rewrap":
        s = site
        src, ln = _insert_after(lines, s, ["loss = torch.tensor(loss.item(), requires_grad=True)"])
        return mk(src, ln, "loss re-wrapped")
    if op == "stale_tensor":
        s = site
        src, ln = _insert_after(
            lines, s, ["if history is not None:", "    loss = loss + 0.1 * history", "history = loss"]
        )
        # `history = None` before the loop.
        loop = _enclosing_for(ast.parse(source), s.lineno)
        if loop is None:
            return None
        src_lines = src.splitlines(keepends=True)
        at = loop.lineno - 1
        src = "".join(src_lines[:at] + [_indent(src_lines[at]) + "history = None\n"] + src_lines[at:])
        ln = [n + 1 for n in ln]
        return mk(src, [ln[2], ln[1]], "loss kept across steps")
    if op == "inplace_leaf":
        s, lin = site
        src, ln = _insert_before(lines, s, [f"{_path(lin)}.weight.clamp_(-1.0, 1.0)"])
        return mk(src, ln, f"in-place clamp of {_path(lin)}.weight")
    if op == "create_graph":
        s, kw = site
        call_src = source
        new = _remove_keyword(call_src, kw)
        return mk(new, [kw.lineno], "autograd.grad without create_graph")
    return None


def _remove_keyword(source: str, kw: ast.keyword) -> str:
    lines = source.splitlines(keepends=True)
    line = lines[kw.lineno - 1]
    lines[kw.lineno - 1] = re.sub(r",\s*create_graph=True", "", line)
    return "".join(lines)


def _enclosing_for(tree, lineno):
    best = None
    for n in ast.walk(tree):
        if isinstance(n, ast.For) and n.lineno <= lineno <= (n.end_lineno or n.lineno):
            if best is None or n.lineno > best.lineno:
                best = n
    return best


def torch_name(tree) -> str | None:
    """How a file names torch (`torch`), or None when it does not import it."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name == "torch" and a.asname is None:
                    return "torch"
    return None
