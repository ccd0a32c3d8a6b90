"""The oracle: what a script's training really does to each parameter, observed with torch alone.

It shares no code with gradsleuth. Around every `backward()` of the first `steps` optimizer
steps it asks autograd itself which parameters the loss reaches
(`torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)`, before the real
backward; where autograd refuses that, as under reentrant checkpointing, which gradients the
real backward creates or adds to), reads `.grad` when the optimizer steps, and compares every
parameter before and after each step. An exception ends the observation and is recorded with its innermost frame.

Per parameter the symptom is one of `ok` (reached, a non-zero gradient at some step, changed
by some step), `none` (the loss never reached it), `zero` (reached, but the gradient was zero
or absent at every step), `stale` (a gradient, but no step changed it), over the parameters of
every model the script built: the roots (modules no other module holds), named as
`named_parameters()` would name them, with modules and parameters kept in plain lists, dicts
and attributes named as if registered (`heads.0.weight`), so a mutant that unregisters them
names the same parameters as the original. With several roots, a name is prefixed by the
script's variable that holds its root.

Also records which lines of the watched files ran during the first step (`--cover FILE`),
which the harness uses to place mutations only where code runs.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback

STEPS = 3


class _Stop(BaseException):
    pass


def _walk(module, prefix, out_params, seen):
    import torch

    if id(module) in seen:
        return
    seen.add(id(module))
    for name, p in list(module._parameters.items()):
        if p is not None and id(p) not in out_params:
            out_params[id(p)] = (prefix + name, p)
    for name, b in list(module._buffers.items()):
        if isinstance(b, torch.Tensor) and b.requires_grad and id(b) not in out_params:
            out_params[id(b)] = (prefix + name, b)
    for name, m in list(module._modules.items()):
        if m is not None:
            _walk(m, f"{prefix}{name}.", out_params, seen)
    # Modules and parameters kept where nn.Module does not look, named as if registered.
    for name, v in list(vars(module).items()):
        if name.startswith("_") or name == "training":
            continue
        for key, item in _items(v):
            full = f"{prefix}{name}{key}"
            if isinstance(item, torch.nn.Module):
                _walk(item, full + ".", out_params, seen)
            elif isinstance(item, torch.Tensor) and item.is_leaf and item.requires_grad:
                if id(item) not in out_params:
                    out_params[id(item)] = (full, item)


def _items(v):
    import torch

    if isinstance(v, (torch.nn.Module, torch.Tensor)):
        return [("", v)]
    if isinstance(v, (list, tuple)):
        return [(f".{i}", x) for i, x in enumerate(v) if isinstance(x, (torch.nn.Module, torch.Tensor))]
    if isinstance(v, dict):
        return [(f".{k}", x) for k, x in v.items() if isinstance(x, (torch.nn.Module, torch.Tensor))]
    return []


class Oracle:
    def __init__(self, steps, main_globals):
        self.steps = steps
        self.main = main_globals
        self.step = 0
        self.params = {}  # id -> (name, tensor)
        self.reached = {}
        self.nonzero = {}
        self.changed = {}
        self.before = {}
        self.roots = None
        self.error = None
        self.backwards = 0
        self.facts = {}
        self.grads_before = None

    # -- which parameters exist --------------------------------------------------------
    def collect(self):
        import torch

        mods = [o for o in gc.get_objects() if isinstance(o, torch.nn.Module)]
        held = set()
        for m in mods:
            for c in m._modules.values():
                if c is not None:
                    held.add(id(c))
            for name, v in vars(m).items():
                if not name.startswith("_"):
                    for _, item in _items(v):
                        if isinstance(item, torch.nn.Module) and item is not m:
                            held.add(id(item))
        roots = [m for m in mods if id(m) not in held and any(True for _ in m.parameters())]
        names = {id(v): k for k, v in self.main.items() if isinstance(v, torch.nn.Module) and not k.startswith("_")}
        roots = [m for m in roots if id(m) in names] or roots
        roots.sort(key=lambda m: names.get(id(m), "~"))
        several = len(roots) > 1
        for m in roots:
            prefix = f"{names.get(id(m), type(m).__name__)}." if several else ""
            out_params = {}
            _walk(m, prefix, out_params, set())
            for k, v in out_params.items():
                self.params.setdefault(k, v)
        # Parameters only an optimizer holds (not reachable from any root) are not the model's.
        self.roots = [names.get(id(m), type(m).__name__) for m in roots]
        model = self.main.get("model")
        if isinstance(model, torch.nn.Module):
            self.facts = {
                "children": [n for n, c in model.named_children() if any(True for _ in c.parameters())],
                "linears": [
                    n
                    for n, m in model.named_modules()
                    if type(m) is torch.nn.Linear and n and m.weight.requires_grad
                    and all(q is not m.weight for q in _tied(model, m))
                ],
            }

    # -- around backward ---------------------------------------------------------------
    def before_backward(self, tensors):
        import torch

        if self.roots is None:
            self.collect()
        self.grads_before = None
        if self.step >= self.steps:
            return
        self.backwards += 1
        ts = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]
        want = [(k, p) for k, (_, p) in self.params.items() if p.requires_grad]
        if not ts or not want:
            return
        try:
            with torch.enable_grad():
                outs = [t.sum() if t.dim() else t for t in ts]
                gs = torch.autograd.grad(outs, [p for _, p in want], allow_unused=True, retain_graph=True)
        except RuntimeError:
            # A graph autograd.grad cannot run (reentrant checkpointing refuses it): what the
            # real backward accumulates tells instead (a gradient that appears, is replaced or
            # is added to).
            self.grads_before = {k: _grad_state(p) for k, p in want}
            return
        for (k, _), g in zip(want, gs):
            if g is not None:
                self.reached[k] = True

    def after_backward(self):
        before, self.grads_before = self.grads_before, None
        for k, state in (before or {}).items():
            now = _grad_state(self.params[k][1])
            if now[0] is not None and now != state:
                self.reached[k] = True

    def step_pre(self, opt):
        import torch

        if self.roots is None:
            self.collect()
        if self.step >= self.steps:
            return
        for k, (_, p) in self.params.items():
            g = p.grad
            if g is not None and bool(torch.any(g != 0)):
                self.nonzero[k] = True
            self.before.setdefault(k, p.detach().clone())

    def step_post(self, opt):

        if self.step >= self.steps:
            return
        self.step += 1
        self._compare()

    def _compare(self):
        import torch

        for k, (_, p) in self.params.items():
            b = self.before.pop(k, None)
            if b is not None and b.shape == p.shape and not torch.equal(b, p.detach()):
                self.changed[k] = True

    def result(self):
        import torch

        if self.step < self.steps:
            # A loop without optimizer steps (or cut short): what the gradients say.
            for k, (_, p) in self.params.items():
                if p.grad is not None and bool(torch.any(p.grad != 0)):
                    self.nonzero[k] = True
            self._compare()
        params = {}
        for k, (name, _) in self.params.items():
            if not self.reached.get(k):
                s = "none"
            elif not self.nonzero.get(k):
                s = "zero"
            elif not self.changed.get(k):
                s = "stale"
            else:
                s = "ok"
            params[name] = s
        return {
            "roots": self.roots or [],
            "steps": self.step,
            "backwards": self.backwards,
            "params": params,
            "error": self.error,
            "facts": self.facts,
        }


def _grad_state(p):
    g = p.grad
    return (None, None) if g is None else (id(g), g._version)


def _tied(model, lin):
    """Parameters other than `lin`'s own that are the same tensor as its weight (tied)."""
    return [p for n, m in model.named_modules() if m is not lin for p in m._parameters.values() if p is lin.weight]


def _install(oracle):
    import torch

    orig_backward = torch.Tensor.backward
    orig_autograd_backward = torch.autograd.backward
    inside = [False]

    def backward(self, *a, **k):
        if not inside[0]:
            oracle.before_backward([self])
        outer = not inside[0]
        inside[0] = True
        try:
            out = orig_backward(self, *a, **k)
        finally:
            inside[0] = not outer
        if outer:
            oracle.after_backward()
        return out

    def autograd_backward(tensors, *a, **k):
        if not inside[0]:
            oracle.before_backward([tensors] if isinstance(tensors, torch.Tensor) else list(tensors))
        outer = not inside[0]
        inside[0] = True
        try:
            out = orig_autograd_backward(tensors, *a, **k)
        finally:
            inside[0] = not outer
        if outer:
            oracle.after_backward()
        return out

    torch.Tensor.backward = backward
    torch.autograd.backward = autograd_backward
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(lambda opt, a, k: oracle.step_pre(opt))
    register_optimizer_step_post_hook(lambda opt, a, k: oracle.step_post(opt))


def _cover(files, lines):
    """Lines of `files` that run, until the first optimizer step ends (a local tracer only)."""
    files = set(files)

    def local(frame, event, arg):
        if event == "line":
            lines.add((frame.f_code.co_filename, frame.f_lineno))
        return local

    def glob(frame, event, arg):
        if frame.f_code.co_filename in files:
            lines.add((frame.f_code.co_filename, frame.f_lineno))
            return local
        return None

    return glob


def observe(script, out, steps=STEPS, cover=()):
    """Runs `script` as `python script` would, observed; writes the result to `out`."""
    import torch

    torch.manual_seed(0)
    script = os.path.abspath(script)
    sys.argv = [script]
    sys.path.insert(0, os.path.dirname(script))
    main = {"__name__": "__main__", "__file__": script}
    oracle = Oracle(steps, main)
    _install(oracle)
    lines = set()
    cover = [os.path.abspath(c) for c in cover]
    if cover:
        sys.settrace(_cover(cover, lines))
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(lambda opt, a, k: sys.settrace(None))
    try:
        with open(script) as f:
            code = compile(f.read(), script, "exec")
        exec(code, main)
    except _Stop:
        pass
    except SystemExit as e:
        if e.code not in (0, None):
            oracle.error = {"type": "SystemExit", "message": str(e.code), "file": None, "line": None}
    except BaseException as e:  # noqa: BLE001 - the mutant's exception is the observation
        tb = traceback.extract_tb(e.__traceback__)
        inner = tb[-1] if tb else None
        oracle.error = {
            "type": type(e).__name__,
            "message": str(e)[:500],
            "file": inner.filename if inner else None,
            "line": inner.lineno if inner else None,
            "in_backward": any(f.name in ("backward", "autograd_backward", "_engine_run_backward") for f in tb),
        }
    sys.settrace(None)
    res = oracle.result()
    if cover:
        res["covered"] = sorted([f, n] for f, n in lines)
    with open(out, "w") as f:
        json.dump(res, f)
    return res


if __name__ == "__main__":
    observe(sys.argv[2], sys.argv[1], cover=sys.argv[3:])
