"""`gradsleuth.watch` / `gradsleuth run --watch`: gradient health for a whole run.

What torch demands from Python, and nothing more: optimizer step hooks that compute the norms
with one fused `torch._foreach_norm` on the tensors' own device (grads every step, updates every
`update_every` steps) and hand plain floats to the Rust `Watcher` (aggregation, detectors,
TensorBoard, the record); forward hooks on the watched models that keep what re-running a step
needs (its inputs by reference, the RNG state, the gradient arriving at the output, the graph's
root nodes); and the re-run itself, when a gradient first turns NaN/Inf: a first pass under a
`TorchFunctionMode` that stops the forward at the op that made the NaN (`_FindMode`), and only
when that cannot decide, a second that records every op and hooks every backward node.

The re-run happens in the optimizer's pre-step hook, before the weights change: the same
inputs, the same weights, the same RNG state (restored after), buffers (BatchNorm statistics)
saved and restored, gradients computed with `torch.autograd.grad` so `.grad` is not touched:
the user's training continues exactly as it would have.
"""

from __future__ import annotations

import bisect
import collections
import json
import os
import sys
import time
import weakref

import torch
from torch.overrides import TorchFunctionMode

from gradsleuth import _versions
from gradsleuth._core import (
    Trace,
    finite,
    graph_nodes,
    has_nan,
    op_name,
    sequence_index,
    singular_at,
    singular_count,
    tensor_stats,
    walk,
)
from gradsleuth._tracer import flat_parts, op_site_of, unwrapped_name
from gradsleuth._versions import own_ops


def _flat_tensors(obj, out=None):
    out = [] if out is None else out
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _flat_tensors(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _flat_tensors(x, out)
    return out


def _local(t):
    """An FSDP2 DTensor's local shard (norms must not trigger collectives)."""
    return getattr(t, "_local_tensor", t)


def _pieces(p, name):
    """What a watched optimizer parameter is measured as: (name, span) pairs, `span` the
    stretch of its local storage, None for all of it. An FSDP1 flat parameter (without
    `use_orig_params`) holds a unit's parameters end to end: each one this rank holds elements
    of is measured on its stretch, named as the model names it (`unit.fqn`); none on this rank
    are not measured here."""
    if not getattr(p, "_is_flat_param", False) or not hasattr(p, "_shard_param_infos"):
        return [(name, None)]
    unit = name[: -len("_flat_param")].rstrip(".") if name.endswith("_flat_param") else name
    dot = "." if unit and not unit.endswith(":") else ""  # `0:` prefixes the first of several models
    return [
        (f"{unit}{dot}{fqn}", (offset, numel))
        for fqn, _, _, _, offset, numel in flat_parts(p)
        if offset is not None and numel
    ]


def _sharded(p) -> bool:
    """A parameter whose forward gathers it from other ranks: an FSDP2 DTensor, an FSDP1 flat
    parameter or a view of one, a DeepSpeed ZeRO-3 partitioned parameter."""
    return (
        hasattr(p, "_local_tensor")
        or getattr(p, "_is_flat_param", False)
        or getattr(p, "_fsdp_flattened", False)
        or hasattr(p, "ds_tensor")
    )


def _piece(t, span):
    """A parameter's (or its gradient's) local values, or the stretch `span` of them."""
    t = _local(t)
    return t if span is None else t.narrow(0, *span)


class _Stop(Exception):
    """Raised from `_FindMode` to end the re-run's forward as soon as the origin is found."""


# Ops whose derivative can be infinite (or 0/0) where their forward value is finite.
_SINGULAR = frozenset(("sqrt", "rsqrt", "pow", "__pow__", "float_power", "acos", "asin", "atan2"))


def _sequence_nr() -> int | None:
    """The autograd sequence number the next node made on this thread gets: nodes made by the
    same forward, replayed, get the same numbers counted from it."""
    try:
        return torch._C._autograd._get_sequence_nr()
    except (AttributeError, RuntimeError):  # pragma: no cover - other torch versions
        return None


class _FindMode(TorchFunctionMode):
    """The re-run's first pass: only the checks that can end the forward at the origin,
    nothing recorded, so it costs the forward up to the culprit and little more. When it
    does not stop, `_NanMode` re-runs the step and records everything.

    - `stop_on_nan` (the output's gradient was non-finite: the forward or the loss made the
      NaN): each op's output is checked as it runs; the first that made a NaN from inputs
      without one is the origin.
    - `nan_params` (ids of the parameters whose gradient is non-finite) with `params` (the
      optimizer's): a NaN born in backward reaches exactly the parameters upstream of its node.
      Once every NaN parameter has been used, the first op whose derivative is infinite at its
      inputs and whose upstream parameters are exactly the NaN ones is the origin. (Any other
      singular op is not: it would have made other parameters NaN, or spared some that are.)

    An op whose result never reached the output (a statistic computed and detached for a log)
    cannot be the origin: `original` (the step's own graph roots, and the sequence number its
    forward started at) tells which nodes the step's backward reached, matched by sequence
    number counted from the start of each forward. Without it, a NaN born in backward is not
    stopped at (the second pass decides).
    """

    def __init__(self, stop_on_nan=False, nan_params=frozenset(), params=frozenset(), original=None):
        super().__init__()
        self.original = original  # (roots, seq0) of the step being replayed
        self.reached = None  # sequence offset -> node type, of the nodes the output reaches
        self.seq0 = None  # the sequence number the re-run's forward starts at
        self.stop_on_nan = stop_on_nan
        self.nan_params = nan_params
        self.params = params
        self.unused = set(nan_params)  # NaN parameters the forward has not used yet
        self.stopped = None  # ("forward", op, site, stats) | ("singular", op, site, node, why, stats)

    def __enter__(self):
        self.seq0 = _sequence_nr()
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.stop_on_nan:
            outs = _flat_tensors(out)
            if any(has_nan(t) for t in outs):
                ins = _flat_tensors((args, kwargs))
                node = next((t.grad_fn for t in outs if t.grad_fn is not None), None)
                if not any(has_nan(t) for t in ins) and (node is None or self._reached(node) is not False):
                    stats = [tensor_stats(t) for t in ins if t.is_floating_point()][:6]
                    self.stopped = ("forward", op_name(func), op_site_of(sys._getframe(1)), stats)
                    raise _Stop
        elif self.unused:
            for t in _flat_tensors((args, kwargs)):
                self.unused.discard(id(t))
        elif self.nan_params and getattr(func, "__name__", "") in _SINGULAR:
            self._singular_stop(func, sys._getframe(1), (args, kwargs), _flat_tensors(out))
        return out

    def _singular_stop(self, func, frame, inputs, outs):
        node = next((t.grad_fn for t in outs if t.grad_fn is not None), None)
        if node is None:
            return
        name = op_name(func)
        tensors = _flat_tensors(inputs)
        why = singular_at(name, tensors, inputs)
        if not why or _upstream_leaves(node) & self.params != self.nan_params or not self._reached(node):
            return
        stats = [tensor_stats(t) for t in tensors if t.is_floating_point()][:6]
        self.stopped = ("singular", name, op_site_of(frame), type(node).__name__, why, stats)
        raise _Stop

    def _reached(self, node) -> bool | None:
        """Whether the replayed step's backward reached this node's twin (None: unknown)."""
        if self.original is None or self.seq0 is None:
            return None
        if self.reached is None:
            self.reached = sequence_index(*self.original)
        return self.reached.get(node._sequence_nr() - self.seq0) == type(node).__name__


class _NanMode(TorchFunctionMode):
    """During a re-run: every op with its line, its inputs and outputs (kept by reference, for
    the re-run only, so that the first op whose output is non-finite can be found afterwards)
    and the autograd sequence number before it: the nodes an op made are numbered from there
    to the next op's (`origin`). No `grad_fn` is read per op: a node read from Python keeps a
    Python object, and torch frees long chains of those by recursion (`graph_nodes` bounds
    the depth of what is read)."""

    def __init__(self):
        super().__init__()
        self.ops = []  # (func, site, inputs, outputs)
        self.seqs = []  # sequence number before each op

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        seq = _sequence_nr()
        out = func(*args, **kwargs)
        outs = _flat_tensors(out)
        if not outs or seq is None:
            return out
        self.ops.append((func, op_site_of(sys._getframe(1)), (args, kwargs), outs))
        self.seqs.append(seq)
        return out

    def origin(self, node):
        """(op, site) of the op that made `node` (nodes inside a composite op count as its)."""
        i = bisect.bisect_right(self.seqs, node._sequence_nr()) - 1
        if i < 0 or type(node).__name__ == "AccumulateGrad":
            return ("?", None)
        func, site, _, _ = self.ops[i]
        return (op_name(func), site)

    def first_nonfinite(self):
        """(op, site, input stats) of the first op that made a NaN from inputs without one; if
        no op made a NaN, the first that made an Inf from finite inputs. (An intentional
        `masked_fill(mask, -inf)` makes Infs; the softmax of a row of them makes the NaN.)"""
        for bad in (has_nan, lambda t: not finite(t)):
            for func, site, inputs, outs in self.ops:
                if any(bad(t) for t in outs):
                    ins = _flat_tensors(inputs)
                    if not any(bad(t) for t in ins):
                        return op_name(func), site, [tensor_stats(t) for t in ins if t.is_floating_point()][:6]
        return None

    def singular(self, reachable):
        """The last op (in forward order, so the first to run in backward) whose derivative is
        infinite at its inputs, among those whose node the gradient reaches: (op, site, node
        name, why, input stats)."""
        for func, site, inputs, outs in reversed(self.ops):
            if getattr(func, "__name__", "") not in _SINGULAR:
                continue
            node = next((t.grad_fn for t in outs if t.grad_fn is not None), None)
            if node is None or node not in reachable:
                continue
            why = singular_at(op_name(func), _flat_tensors(inputs), inputs)
            if why:
                ins = _flat_tensors(inputs)
                return (
                    op_name(func),
                    site,
                    type(node).__name__,
                    why,
                    [tensor_stats(t) for t in ins if t.is_floating_point()][:6],
                )
        return None


def _upstream_leaves(node) -> set:
    """Ids of the leaf tensors (parameters) whose gradient `node`'s backward reaches."""
    return set(walk(node)["leaves"])


class _LossProbe(TorchFunctionMode):
    """The loss computation: from a watched model's forward to the backward. It runs outside
    the model, so a re-run of the model cannot see it; a NaN gradient born there (`sqrt` of a
    distance that is exactly 0) is found from what this probe keeps of the step. Only ops whose
    derivative can be infinite at finite inputs are looked at: for each, with its line, how
    many inputs meet that condition, counted on the device and not read until a NaN asks. Once
    backward starts it only forwards (`passive`), until the next forward or optimizer step
    takes it off the mode stack, outside any op."""

    def __init__(self, ops: list, forward: list):
        super().__init__()
        self.ops = ops  # (op, site, node, short, exponent, count), shared by a step's probes
        # (op, site, count of non-finite values it output): a division by a temperature
        # annealed to zero, an `exp` that overflows, made in the forward of the loss
        self.forward = forward
        self.passive = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.passive:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in ("backward", "grad"):
            self.passive = True
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if len(self.forward) < 256:
            try:
                made = [t for t in _flat_tensors(out) if t.grad_fn is not None and t.is_floating_point()]
                if made:
                    bad = sum(torch.count_nonzero(~torch.isfinite(t.detach())) for t in made)
                    self.forward.append((op_name(func), op_site_of(sys._getframe(1)), bad))
            except Exception:  # noqa: BLE001 - never break the user's loss
                pass
        if name in _SINGULAR and len(self.ops) < 256:
            try:
                outs = [t for t in _flat_tensors(out) if t.grad_fn is not None]
                found = singular_count(op_name(func), _flat_tensors((args, kwargs)), (args, kwargs)) if outs else None
                if found is not None:
                    node = type(outs[0].grad_fn).__name__
                    self.ops.append((op_name(func), op_site_of(sys._getframe(1)), node, *found))
            except Exception:  # noqa: BLE001 - never break the user's loss
                pass
        return out


class _Found(Exception):
    """Raised from a backward hook to stop the re-run's backward at the culprit."""


class Watch:
    """Monitors gradient health on every optimizer step of a run (see the module doc).

    `models`: the models whose parameters are named (and whose steps can be re-run to trace a
    NaN); `optimizers`: those watched (default: every optimizer that steps, through torch's
    global optimizer hooks).
    """

    def __init__(
        self,
        models=(),
        optimizers=(),
        *,
        log_dir=None,
        thresholds=None,
        status=None,
        roots=None,
    ):
        from gradsleuth._core import Watcher

        self._Watcher = Watcher
        self._models = [weakref.ref(m) for m in models]
        self._roots_fn = roots  # a callable giving models, for `run --watch`
        self._optimizers = list(optimizers)
        self._log_dir = str(log_dir) if log_dir is not None else None
        self._thresholds = json.dumps(thresholds) if thresholds else None
        self._status = sys.stderr.isatty() if status is None else status
        self._last_status = 0.0
        self._watchers = {}  # id(opt) -> (Watcher, params, names)
        self._opt_refs = {}
        self._before = {}  # id(opt) -> the parameters before this step (a sampled step)
        self._buffers = {}  # id(opt) -> buffers those copies go to, kept for the run
        self._reads = _Reads()  # norms on their way from the device to the host
        self._counts = {}  # id(opt) -> steps issued (their norms may not have landed yet)
        self._stepped = set()  # optimizers whose step ran since their scaler's step began
        self._nonfinite = {}  # id(opt) -> whether the latest step read had a NaN/Inf gradient
        self._late_nan = None  # a first NaN read a step late, waiting for this step's norms
        self._handles = []
        self._module_hooks = False
        self._only = None
        self._patched = []
        self._forward_state = {}  # id(model) -> dict(inputs, rng, outs, grads)
        self._replaying = False
        self.localized = None
        self._armed_by = None  # (kind, step) of an anomaly waiting for its op-level step
        self._deep_tracer = None
        self._deep_runs = 0
        self._armed_kinds = set()
        self.closed = False
        self.tracer = None  # the run's tracer, paused during a re-run
        self._probe = None  # the loss probe on the mode stack (see `_LossProbe`)
        self._loss_ops: list = []  # what this step's probes saw, kept for a NaN born there
        self._loss_fwd: list = []  # (op, site, non-finite output count) of this step's loss ops
        self._new_step = True  # the next probe starts a new step's list

    # ---- set-up ----------------------------------------------------------------------
    def start(self):
        # Every hook is global (torch's module and optimizer registries), never one stored on
        # the user's objects: a hook on a module is pickled by `torch.save(model)`, copied by
        # `copy.deepcopy`, and compiled by `torch.jit.script`, and ours can be none of those.
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._only = {id(o): weakref.ref(o) for o in self._optimizers} or None
        self._handles.append(register_optimizer_step_pre_hook(self._pre))
        self._handles.append(register_optimizer_step_post_hook(self._post))
        for ref in self._models:
            m = ref()
            if m is not None:
                self._hook_model(m)
        self._patch_scaler()
        return self

    def _watched(self, opt) -> bool:
        if self._only is None:
            return True
        ref = self._only.get(id(opt))
        return ref is not None and ref() is opt

    def _state(self, module):
        """The forward state of a watched model (None for any other module, and for a new
        module at a dead model's address)."""
        st = self._forward_state.get(id(module))
        return st if st is not None and st["model"]() is module else None

    def _hook_model(self, m):
        if self._state(m) is not None:
            return
        # A module without parameters (a loss written as a module) is part of the loss
        # computation: it neither stops nor starts the loss probe.
        self._forward_state[id(m)] = {"model": weakref.ref(m), "params": any(True for _ in m.parameters())}
        if not self._module_hooks:
            from torch.nn.modules import module as module_mod

            self._module_hooks = True
            self._handles.append(module_mod.register_module_forward_pre_hook(self._fwd_pre))
            self._handles.append(_versions.global_forward_hook_with_kwargs(self._fwd_post))

    def _patch_scaler(self):
        GradScaler = _versions.grad_scaler()
        if GradScaler is None:  # pragma: no cover
            return
        original = GradScaler.step
        watch = self

        def step(scaler, optimizer, *args, **kwargs):
            # Skipped or not is whether the optimizer's own step ran (our pre-step hook saw
            # it): the scaler reads its found-inf flags itself, gradsleuth reads nothing.
            watch._stepped.discard(id(optimizer))
            result = original(scaler, optimizer, *args, **kwargs)
            try:
                if watch._watched(optimizer) and not watch.closed:
                    w = watch._watchers.get(id(optimizer))
                    if w is None:
                        w = watch._watcher_for(optimizer)
                    skipped = id(optimizer) not in watch._stepped
                    watch._reads.put(None, lambda _host, _late: w[0].scaler(skipped))
            except Exception:  # noqa: BLE001 - never break the user's step
                pass
            return result

        step.__qualname__ = original.__qualname__
        GradScaler.step = step
        self._patched.append((GradScaler, "step", original))

    def close(self):
        """Removes every hook; the record stays available for `report()`."""
        if self.closed:
            return
        self.closed = True
        self._stop_probe()
        if self._deep_tracer is not None and not self._deep_tracer.done:
            self._deep_tracer.finish()
        for h in self._handles:
            try:
                h.remove()
            except Exception:  # noqa: BLE001
                pass
        self._handles.clear()
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched.clear()
        try:
            self._reads.ready(wait=True)  # the last steps' norms belong in the record
            if self._late_nan is not None:  # the last step's NaN: nothing after it to re-run
                _opt, first, w, _bad, step = self._late_nan
                self._late_nan = None
                w.set_late_nan(step, first, "end")
                self.localized = {"step": step, "params": first}
        except Exception as e:  # noqa: BLE001
            print(f"gradsleuth watch: {type(e).__name__}: {e}", file=sys.stderr)
        self._forward_state.clear()
        self._before.clear()
        self._buffers.clear()
        if self._status:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- naming ----------------------------------------------------------------------
    def _models_now(self):
        models = [r() for r in self._models]
        if self._roots_fn is not None:
            try:
                models += list(self._roots_fn())
            except Exception:  # noqa: BLE001
                pass
        return [m for m in models if m is not None]

    def _watcher_for(self, opt):
        entry = self._watchers.get(id(opt))
        if entry is not None:
            return entry
        names = {}
        models = self._models_now()
        for i, m in enumerate(models):
            prefix = f"{i}:" if len(models) > 1 else ""
            strip = unwrapped_name(m)
            for n, p in m.named_parameters():
                names.setdefault(id(p), prefix + strip(n))
            self._hook_model(m)
        params, spans, labels = [], [], []
        for j, p in enumerate(p for g in opt.param_groups for p in g["params"]):
            n = names.get(id(p), f"{type(opt).__name__}.param{j}")
            for name, span in _pieces(p, n):
                params.append(p)
                spans.append(span)
                labels.append((name, name.rpartition(".")[0]))
        w = self._Watcher(labels, self._thresholds)
        if self._log_dir and not self._watchers:  # the first optimizer's numbers go to TensorBoard
            try:
                w.tensorboard(self._log_dir)
            except OSError as e:
                print(f"gradsleuth watch: {e}", file=sys.stderr)
        entry = (w, params, [x[0] for x in labels], spans)
        self._watchers[id(opt)] = entry
        self._opt_refs[id(opt)] = weakref.ref(opt)
        return entry

    # ---- per step ----------------------------------------------------------------------
    def _pre(self, opt, args, kwargs):
        if self.closed or self._replaying or not self._watched(opt):
            return None
        self._stop_probe()
        self._new_step = True
        # A closure (Lightning's automatic optimization, LBFGS) runs this step's forward and
        # backward inside `step()`, after this hook: the step is read when it returns (the
        # weights are still those before the update; the model has been seen by then).
        # (torch hands the hook `step`'s own arguments, the optimizer first)
        at = next((i for i, a in enumerate(args) if callable(a) and a is not opt), None)
        closure = kwargs.get("closure") if kwargs else None
        if closure is None and at is not None:
            closure = args[at]
        if closure is None:
            self._begin_step(opt)
            return None
        pending = [True]

        def closure_then_read(*a, **k):
            out = closure(*a, **k)
            if pending:  # the first call computes the step's gradients (LBFGS calls it again)
                pending.clear()
                self._stop_probe()
                self._begin_step(opt)
            return out

        if kwargs and kwargs.get("closure") is closure:
            return args, {**kwargs, "closure": closure_then_read}
        return (*args[:at], closure_then_read, *args[at + 1 :]), kwargs

    def _begin_step(self, opt):
        """A step's gradients are ready and its update not yet applied: its norms go on their
        way to the host, the weights are copied for a sampled update ratio."""
        try:
            self._reads.ready()  # what the device has finished since, in step order
            w, params, names, spans = self._watcher_for(opt)
            self._stepped.add(id(opt))
            n = self._counts[id(opt)] = self._counts.get(id(opt), 0) + 1
            with own_ops():  # the reductions are gradsleuth's, not ops of the user's modes
                idx, grads = [], []
                for i, p in enumerate(params):
                    if p.grad is not None:
                        idx.append(i)
                        grads.append(_piece(p.grad, spans[i]))
                values = _stacked(torch._foreach_norm(grads)) if grads else None
            # (on the CPU the values are read now: a NaN is localized inside `put`, by a
            # replay under modes that must see the ops)
            self._reads.put(values, lambda host, late: self._grads_read(opt, w, params, names, idx, host, late))
            if n % w.update_every == 0:
                with own_ops():
                    self._before[id(opt)] = self._copy_before(
                        id(opt), [_piece(p, s).detach() for p, s in zip(params, spans)]
                    )
            if self._late_nan is not None:
                self._late_localize()
            self._show_status(w)
        except Exception as e:  # noqa: BLE001 - never break the user's step
            print(f"gradsleuth watch: {type(e).__name__}: {e}", file=sys.stderr)

    def _grads_read(self, opt, w, params, names, idx, host, late):
        """One step's gradient norms, now in host memory (`late`: a later step has started)."""
        with own_ops():
            first, new, nonfinite = w.grads_from(idx, host if host is not None else _EMPTY)
        self._nonfinite[id(opt)] = bool(nonfinite)
        # One op-level step per kind of anomaly (at most three per run): layer after layer
        # vanishing is one story, and its op-level step tells it.
        armable = [k for k in new if k in ("stopped", "dead", "exploding", "vanishing") and k not in self._armed_kinds]
        if armable and self._armed_by is None and self._deep_runs < 3 and self._deep_tracer is None:
            main = self.tracer
            if main is None or main.done:
                self._armed_by = (armable[0], w.steps, w)
        if first:
            bad = {id(params[i]) for i in nonfinite}
            if late:
                self._late_nan = (opt, [names[i] for i in first], w, bad, w.steps)
            else:
                self._localize(opt, [names[i] for i in first], w, bad)

    def _late_localize(self):
        """A non-finite gradient read a step late (the device's copy had not landed when its
        step ran): that step's inputs are gone and its update applied. Now the host may wait
        (only after a NaN): if the update wrote NaN/Inf into weights, a re-run would start
        from them, so it is said, not re-run; if this step's gradients are non-finite again,
        this step is re-run to its op; otherwise the NaN is reported unlocalized."""
        opt, first, w, bad, step = self._late_nan
        self._late_nan = None
        self._reads.ready(wait=True)
        _, params, names, spans = self._watchers[id(opt)]
        broken = [names[i] for i, p in enumerate(params) if not finite(_piece(p, spans[i]))]
        if broken:
            how = "weights"
        elif self._nonfinite.get(id(opt)):
            self._localize(opt, first, w, bad, late_from=step)
            return
        else:
            how = "gone"
        w.set_late_nan(step, first, how, broken)
        self.localized = {"step": step, "params": first}

    def _copy_before(self, key, tensors):
        """The parameters before the step, copied into buffers kept from one sampled step to the
        next (one copy of the parameters, allocated once: a fresh allocation of that size costs
        several times the copy itself, in page faults)."""
        bufs = self._buffers.get(key)
        if bufs is None or any(
            b.shape != t.shape or b.dtype != t.dtype or b.device != t.device for b, t in zip(bufs, tensors)
        ):
            bufs = [torch.empty_like(t) for t in tensors]
            self._buffers[key] = bufs
        torch._foreach_copy_(bufs, tensors)
        return bufs

    def _post(self, opt, args, kwargs):
        before = self._before.pop(id(opt), None)
        if before is None or self.closed:
            return
        try:
            w, params, _, spans = self._watchers[id(opt)]
            with own_ops():
                after = [_piece(p, s).detach() for p, s in zip(params, spans)]
                torch._foreach_sub_(before, after)  # in place: the buffers now hold -update
                values = _stacked(torch._foreach_norm(before + after))
            self._reads.put(values, lambda host, _late: _read_updates(w, host))
        except Exception as e:  # noqa: BLE001
            print(f"gradsleuth watch: {type(e).__name__}: {e}", file=sys.stderr)

    def _show_status(self, w):
        if not self._status:
            return
        now = time.monotonic()
        if now - self._last_status < 0.5:
            return
        self._last_status = now
        line = " · ".join(x[0].status_line() for x in self._watchers.values())
        sys.stderr.write("\r\x1b[2K" + line)
        sys.stderr.flush()

    # ---- what a re-run needs -------------------------------------------------------------
    def _arm_deep(self, module, args):
        """An anomaly asked for an op-level look: trace this training step with a one-step
        tracer of its own (started here, in the model's forward pre-hook, where registering
        global hooks is safe; the root call it just missed is handed to it by hand)."""
        from gradsleuth._core import Recorder
        from gradsleuth._tracer import Tracer

        kind, step, w = self._armed_by
        self._armed_by = None
        self._deep_runs += 1
        self._armed_kinds.add(kind)
        rec = Recorder("run", 1)

        def done(_t, rec=rec, kind=kind, step=step, w=w):
            self._deep_tracer = None
            try:
                w.add_deep(rec.report(), kind, step)  # Rust keeps the cut findings
            except Exception as e:  # noqa: BLE001
                print(f"gradsleuth watch: armed capture: {type(e).__name__}: {e}", file=sys.stderr)

        tracer = Tracer(rec, 1, on_done=done, deep=True, watch_gradients=False).start()
        self._deep_tracer = tracer
        tracer._forward_pre(module, args)

    def root_seen(self, module):
        """`run --watch`: the run's tracer saw `module` called as a root for the first time,
        from its global pre-hook. Watched from this very call, its first step can be re-run
        too (the global post hook records this call's inputs)."""
        if self.closed or self._replaying or self._state(module) is not None:
            return
        try:
            self._hook_model(module)
            self._fwd_pre(module, ())
        except Exception as e:  # noqa: BLE001 - never break the user's forward
            print(f"gradsleuth watch: {type(e).__name__}: {e}", file=sys.stderr)

    def _fwd_pre(self, module, args):
        if _compiling():
            return None
        st = self._state(module)
        if st is None or self._replaying or self.closed:
            return None
        if st["params"]:
            self._stop_probe()
        if self._armed_by is not None and torch.is_grad_enabled():
            try:
                self._arm_deep(module, args)
            except Exception as e:  # noqa: BLE001 - never break the user's forward
                print(f"gradsleuth watch: arming: {type(e).__name__}: {e}", file=sys.stderr)
        if not torch.is_grad_enabled():
            return None
        st.pop("inputs", None)
        st["seq0"] = _sequence_nr()
        st["roots"] = None
        with own_ops():
            st["rng"] = torch.get_rng_state()
            st["cuda_rng"] = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        st["grads"] = {}
        st["outs"] = None
        return None

    def _fwd_post(self, module, args, kwargs, output):
        if _compiling():
            return None
        st = self._state(module)
        if st is None or self._replaying or self.closed or "rng" not in st or not torch.is_grad_enabled():
            return None
        st["inputs"] = (args, kwargs)
        with own_ops():
            outs = [t for t in _flat_tensors(output) if t.requires_grad]
            st["outs"] = len(outs)
            # The graph's root nodes, until this model's next forward: after backward they hold
            # no saved tensors, and the user's own `loss` keeps the same graph at least as long.
            # A re-run checks against them that the op it stops at was on the path to the output.
            st["roots"] = [t.grad_fn for t in outs if t.grad_fn is not None]
            grads = st["grads"]
            for i, t in enumerate(outs):

                def keep(g, i=i):
                    grads[i] = g

                t.register_hook(keep)
        if outs and st["params"]:
            self._start_probe()
        return None

    def _start_probe(self):
        """The loss computation starts: probe it (see `_LossProbe`), unless another function
        mode is active (the probe must come off the stack in the order it went on)."""
        try:
            if self._probe is None and torch._C._len_torch_function_stack() == 0:
                if self._new_step:
                    self._loss_ops, self._loss_fwd, self._new_step = [], [], False
                probe = _LossProbe(self._loss_ops, self._loss_fwd)
                probe.__enter__()
                self._probe = probe
        except Exception:  # noqa: BLE001 - without it a loss-born NaN is told, not located
            self._probe = None

    def _stop_probe(self):
        """Takes the probe off the mode stack (called outside any op); if a mode the user
        entered since sits above it, it stays, only forwarding, and comes off later."""
        probe = self._probe
        if probe is None:
            return
        probe.passive = True
        try:
            from torch.overrides import _get_current_function_mode

            if _get_current_function_mode() is probe:
                probe.__exit__(None, None, None)
                self._probe = None
        except Exception:  # noqa: BLE001
            pass

    # ---- NaN to the line ---------------------------------------------------------------------
    def _localize(self, opt, names, w, nan_params, late_from=None):
        trace = Trace(w.steps, names, late_from)
        t0 = time.perf_counter()
        try:
            if self._replay(opt, trace, nan_params) is not False and not trace.found:
                # Nothing in the re-run model made it (the step ran the model several times,
                # or not at all): the step's loss computation may have (decided in Rust).
                trace.loss_origin(self._loss_fwd, self._loss_ops)
        except Exception as e:  # noqa: BLE001 - a failed re-run must not break training
            trace.note(f"re-run failed: {type(e).__name__}: {e}")
        self.localize_seconds = time.perf_counter() - t0
        self.localized = trace.to_dict()
        w.set_nan(trace)

    def _replay(self, opt, trace, nan_params):
        params = {id(p) for g in opt.param_groups for p in g["params"]}
        model = st = None
        for s in self._forward_state.values():
            m = s["model"]()
            if m is not None and "inputs" in s and any(id(p) in params for p in m.parameters()):
                model, st = m, s
                break
        if model is None:
            trace.note("no watched model owns these parameters (pass the model to watch())")
            return
        if any(_sharded(p) for p in model.parameters()):
            # A NaN can reach some ranks' shards only: the all-gathers of a re-run on those
            # ranks alone would wait forever, and its forward leaves the parameters unsharded.
            trace.note(
                "not re-run: the model is sharded (FSDP, ZeRO-3), and a re-run on one rank would run"
                " its collectives alone"
            )
            return False  # nor is the loss computation blamed: the model's output was not checked
        if st.get("outs") is None or len(st["grads"]) < (st["outs"] or 0) or not st["grads"]:
            trace.note("the model's output got no gradient this step")
            return
        out_grads = [st["grads"][i] for i in sorted(st["grads"])]
        grads_finite = all(finite(g) for g in out_grads)
        args, kwargs = st["inputs"]
        saved_rng = torch.get_rng_state()
        saved_cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        buffers = [(b, b.detach().clone()) for b in model.buffers()]
        tracer_active = self.tracer is not None and self.tracer.active
        if tracer_active:
            self.tracer.active = False
        self._replaying = True
        hooks = []
        found = {}

        def forward(mode):
            torch.set_rng_state(st["rng"])
            if st.get("cuda_rng") is not None:
                torch.cuda.set_rng_state_all(st["cuda_rng"])
            try:
                with torch.enable_grad(), mode:
                    return model(*args, **kwargs)
            except _Stop:
                return None
            finally:
                with torch.no_grad():
                    for b, copy in buffers:
                        b.copy_(copy)
                torch.set_rng_state(saved_rng)
                if saved_cuda is not None:
                    torch.cuda.set_rng_state_all(saved_cuda)

        try:
            # First pass, stopping at the origin. A non-finite gradient at the output: the
            # forward (or the loss) made the NaN, so each op is checked as it runs. A finite one:
            # the NaN was born in the model's backward, after the NaN parameters were used.
            nan_params = frozenset(nan_params & params)
            if not grads_finite or nan_params:
                roots, seq0 = st.pop("roots", None), st.get("seq0")
                original = (roots, seq0) if roots and seq0 is not None else None
                find = _FindMode(stop_on_nan=not grads_finite, nan_params=nan_params, params=params, original=original)
                out = forward(find)
                if find.stopped is not None:
                    kind, *found_at = find.stopped
                    (trace.forward if kind == "forward" else trace.singular)(*found_at)
                    return
                if not grads_finite and all(finite(t) for t in _flat_tensors(out)):
                    # A finite output got a non-finite gradient: the loss code (outside the model)
                    # made it (`_localize` asks the loss probe where).
                    trace.from_loss = True
                    return
            # Second pass, recording every op: an Inf-only forward, or a NaN born in backward
            # that no op's forward values explain.
            mode = _NanMode()
            out = forward(mode)
            if not all(finite(t) for t in _flat_tensors(out)):
                # The forward itself went non-finite: that op is the origin; every backward node
                # after it only carries the NaN along.
                first = mode.first_nonfinite()
                mode.ops.clear()
                if first is not None:
                    trace.forward(*first)
                else:
                    trace.note("the forward output is non-finite, but no op made it from finite inputs")
                return
            outs = [t for t in _flat_tensors(out) if t.requires_grad]
            pairs = [(t, g) for t, g in zip(outs, out_grads) if g is not None]
            if not pairs:
                trace.note("the re-run produced no output needing a gradient")
                return
            # Every backward node reachable from the outputs (depth-bounded).
            seen = set(graph_nodes([t.grad_fn for t, _ in pairs if t.grad_fn is not None]))

            # Most NaNs born in backward come from an op whose derivative is infinite where it
            # was evaluated (sqrt at 0, x**0.5 at 0, acos at ±1): found from the forward values
            # alone, without running backward.
            hit = mode.singular(seen)
            mode.ops = [(func, site, None, ()) for func, site, _, _ in mode.ops]  # the tensors go
            if hit is not None:
                trace.singular(*hit)
                return

            def check(grad_inputs, grad_outputs, node=None):
                # Nodes run in order: the first one whose result is non-finite had finite inputs
                # (they are earlier nodes' results, or the output gradients, checked finite).
                if found:
                    return
                if not all(finite(g) for g in grad_inputs if g is not None):
                    found["node"] = type(node).__name__
                    found["origin"] = mode.origin(node)
                    raise _Found

            for node in seen:
                if type(node).__name__ == "AccumulateGrad":
                    continue
                hooks.append(node.register_hook(lambda gi, go, node=node: check(gi, go, node)))
            leaves = [p for p in model.parameters() if p.requires_grad]
            try:
                torch.autograd.grad(
                    [t for t, _ in pairs], leaves, grad_outputs=[g for _, g in pairs], allow_unused=True
                )
            except _Found:
                pass  # stopped at the culprit: the rest of backward is not needed
            except RuntimeError as e:
                if not found:
                    raise
                del e
            if found:
                trace.backward(found["node"], *found["origin"])
            else:
                trace.note("no backward node of the model made the non-finite gradient")
        finally:
            for h in hooks:
                h.remove()
            self._replaying = False
            if tracer_active:
                self.tracer.active = True
            torch.set_rng_state(saved_rng)
            if saved_cuda is not None:
                torch.cuda.set_rng_state_all(saved_cuda)

    # ---- results -------------------------------------------------------------------------
    def watchers(self):
        return [e[0] for e in self._watchers.values()]

    def report(self):
        """The diagnosis of the run so far (a `gradsleuth.Report`, command `watch`)."""
        from gradsleuth._core import Recorder

        rec = Recorder("watch", 0)
        self._reads.ready(wait=True)  # asked for: the host may wait for the last steps' norms
        self.attach(rec)
        return rec.report()

    def attach(self, rec):
        ws = self.watchers()
        if ws:
            rec.set_watch(ws)


def _compiling() -> bool:
    """Inside torch.compile's tracing: the hooks step aside (a compiled region is not watched
    op by op, and a hook dynamo cannot trace would split the user's graph)."""
    return _versions.is_compiling()


def _read_updates(w, host):
    with own_ops():
        w.updates_from(host)


def _stacked(norms):
    """0-d norms as one float32 tensor on their device (one kernel; no read)."""
    try:
        return torch.stack(norms).float()  # one device (dtypes are promoted)
    except RuntimeError:  # parameters on several devices: gathered on the first one
        return torch.stack([n.float().to(norms[0].device, non_blocking=True) for n in norms])


_EMPTY = torch.empty(0)


class _Reads:
    """Values reduced on the device, read on the host without making the host wait.

    `put(values, then)` calls `then(host_tensor, late)` once `values` (a 1-d float tensor, or
    None for a callback with nothing to read) are in host memory, in the order they were put.
    A CPU tensor is there at once (no device to wait for; Rust reads its memory). A CUDA
    tensor is copied into pinned memory asynchronously, an event recorded behind the copy, and
    delivered by a later `ready()` once the event has completed (usually the next step's:
    "late"); `ready(wait=True)` waits for them (a NaN to localize, the end of the run). Other
    devices are copied synchronously (no portable event).

    `GRADSLEUTH_WATCH_READS=now` reads every device's values at once (the host waits: a NaN is
    re-run in its own step); `=late` delivers even CPU values a step late, as a GPU does (the
    tests of that path, on a machine without one).
    """

    def __init__(self):
        self._pending = collections.deque()  # (event or None, host tensor or None, then)
        mode = os.environ.get("GRADSLEUTH_WATCH_READS", "")
        self.late = mode == "late"
        self.now = mode == "now"

    def put(self, values, then):
        with own_ops():  # the copies are gradsleuth's; `then` may replay the user's step
            values = self._host(values, then)
        if values is not False:
            then(values, False)

    def _host(self, values, then):
        """`values` in host memory now, or False when they are queued for a later `ready()`."""
        if values is not None and values.device.type == "cuda" and not self.now:
            host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            stream = torch.cuda.current_stream(values.device)
            host.copy_(values, non_blocking=True)  # on that stream, behind the reduction
            event = torch.cuda.Event()
            event.record(stream)
            self._pending.append((event, host, then))
            return False
        if values is not None and values.device.type != "cpu":
            values = values.to("cpu")
        if self.late or self._pending:  # behind earlier values still on their way
            self._pending.append((None, None if values is None else values.clone(), then))
            return False
        return values

    def ready(self, wait=False):
        while self._pending:
            event, host, then = self._pending[0]
            if event is not None:
                if wait:
                    event.synchronize()
                elif not event.query():
                    return
            self._pending.popleft()
            then(host, True)


def watch(model=None, optimizer=None, *, log_dir=None, thresholds=None, status=None) -> Watch:
    """Watches gradient health on every optimizer step until `.close()` (or the `with` block
    ends): per-parameter gradient norms every step, update-to-weight ratios every
    `update_every` steps, anomalies detected as they happen, the first NaN/Inf gradient traced
    to its op and line. `report()` gives the diagnosis; `log_dir` writes TensorBoard events.

        w = gradsleuth.watch(model, optimizer, log_dir="runs/gs")
        train()
        print(w.report())
    """
    models = [] if model is None else (list(model) if isinstance(model, (list, tuple)) else [model])
    opts = [] if optimizer is None else (list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer])
    return Watch(models, opts, log_dir=log_dir, thresholds=thresholds, status=status).start()
