"""The tracer: hooks into torch through public APIs and forwards what it sees to the Rust
`Recorder`. It decides nothing: analysis, classification and rendering happen in Rust.

Hooks (all removed by `finish()`):
- global module forward pre/post hooks: model roots, which modules ran, with grad mode;
- `register_post_accumulate_grad_hook` on every parameter-like leaf: which tensors a
  backward reached, without walking the graph;
- global optimizer step pre/post hooks: gradient and weight norms around each step, one
  fused `_foreach_norm` per list;
- wrappers of `torch.autograd.backward`/`grad`, `Optimizer.__init__`/`zero_grad`,
  `Module.zero_grad` and `GradScaler.step`, for the user's source lines.

Identities are integer keys (`id()` is reused by Python); the tracer keeps only weak
references to tensors, modules and optimizers.
"""

from __future__ import annotations

import os
import sys
import time
import types
import weakref
from collections.abc import Callable

import torch
from torch import nn

from gradsleuth import _versions
from gradsleuth._core import (
    Frames,
    ModuleKind,
    TensorKind,
    bound_names,
    class_def,
    fingerprints,
    forward_def,
    in_owner_init,
    leaf_behind,
    loader,
    model_name,
    models_of_their_own,
    norms,
    root_owner,
    swapped,
    unwrapped,
    wrapper_prefix,
)
from gradsleuth._sites import STDLIB_DIRS
from gradsleuth._versions import own_ops

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Which frames are the user's is decided in Rust (gradsleuth._core.Frames), with a cache per
# code object; the tracer only hands it frames.
# Python's own library: its frames, like installed packages' (found by their folder), are not
# the user's code; a site is the user's line that called into them.
_FRAMES = Frames([_TORCH_DIR, _OWN_DIR], STDLIB_DIRS)


def user_frame(frame):
    """The innermost frame of the user's code, skipping torch, gradsleuth and forwarding stdlib."""
    return _FRAMES.user_frame(frame) if frame is not None else None


def site_of(frame):
    """`(file, line, function)` of the innermost user frame, or `(None, None, None)`."""
    return _FRAMES.site(frame) if frame is not None else (None, None, None)


def op_site_of(frame):
    """Where an op ran: the innermost frame of the user's or an installed library's code."""
    return _FRAMES.inner_site(frame) if frame is not None else (None, None, None)


def multiprocessing_method() -> str:
    import multiprocessing

    # Without fixing the start method (asking for it without allow_none would): the platform's
    # default is the first of those available.
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]


class Tracer:
    """Observes the first `steps` training steps, then removes every hook.

    `on_done` is called once observation is complete (the `run` bootstrap uses it to save
    the capture and, with --stop-after, to end the script). `on_progress`, when given, is
    called at each phase of an observed step (root forward, backward, optimizer step) after
    the phase is recorded: under a launcher the bootstrap saves the capture there, so a rank
    that hangs or is killed still says where it was.
    """

    def __init__(
        self,
        recorder,
        steps: int = 3,
        on_done=None,
        deep: bool = True,
        deep_all: bool = False,
        on_progress=None,
        watch_gradients: bool = True,
    ):
        self.rec = recorder
        # Watch the script's writes to gradients between backward and the step (GS215); not
        # under `watch` (a step it armed, `run --watch`): its NaN probe and replay need the
        # mode stack then.
        self._watch_gradients = watch_gradients
        # Op-level capture of the first iteration (every op, cuts, in-place ops); with
        # deep_all, of every observed iteration.
        self._deep = deep or deep_all
        self._deep_all = deep_all
        self._oplog = None
        self._mode = None
        self._setitem = None  # the `Tensor.__setitem__` the op log needs on torch 2.1 (_setitem_shim)
        # The optimizer step running: (mode, optimizer, its parameters' versions before it,
        # whether the mode is passive for it), see `_step_pre`.
        self._stepping: tuple | None = None
        self._pending_pop: list = []
        self._scanned: set[int] = set()
        self._said: set = set()
        # Where `torch.inference_mode()` blocks were entered while observing (the last one).
        self._inference_site: tuple = (None, None, None)
        self._inference_keys: list[int] = []
        self._rearmed = False
        self._bits_before: dict[int, dict[int, float]] = {}
        # Fingerprints of parameters no optimizer holds (none exists), after the first backward.
        self._bits_unheld: dict[int, float] = {}
        self._deep_since = 0
        # Gradient norms each optimizer's step read during the op-level step (key -> norm).
        self._deep_known: dict[int, float | None] = {}
        self._first_backward_site = None
        self.steps = max(1, int(steps))
        self.on_done = on_done
        self.on_progress = on_progress
        # called with a model the first time it is called as a root
        self.on_root: Callable[[nn.Module], object] | None = None
        self._finish_pending = False  # done, waiting to be outside any op to finish
        self.active = False
        self.done = False
        self._handles: list = []
        self._t_iteration: float | None = None
        self._patches: list = []
        self._unpatch: list = []
        self._keys: dict[int, int] = {}
        self._objs: dict[int, weakref.ref] = {}
        self._next_key = 0
        self._roots: dict[int, weakref.ref] = {}
        self._root_names: dict[int, str] = {}
        self._known_modules: set[int] = set()
        self._hooked: set[int] = set()
        self._free_names: dict[int, str] = {}  # optimizer tensors, by the names the script binds
        self._unnamed: dict[int, int] = {}  # id -> key of optimizer tensors no name bound yet
        self._depth = 0
        self._root_call = 0
        self._last_call: dict[int, int] = {}
        self._module_stack: list[int] = []
        self._orphan_objs: dict[int, list] = {}
        self._optimizers: dict[int, weakref.ref] = {}
        self._opt_sites: dict[int, tuple] = {}
        self._opt_keys_held: set[int] = set()
        self._opt_steps: dict[int, int] = {}
        self._steps_seen: dict[int, int] = {}
        self._weights_after: dict[int, dict[int, float]] = {}
        self._opt_shape: dict[int, tuple[int, ...]] = {}
        # Optimizers that update flat copies of the model's parameters (DeepSpeed's ZeRO):
        # their key -> (the wrapper, weakly; its attribute listing the model's parameters).
        self._copies: dict[int, tuple] = {}
        self._copy_stepped: set[int] = set()
        self._registered_ids: set[int] = set()  # the parameters of the model being scanned
        self._param_at: dict[tuple, int] = {}  # (module key, attribute) -> parameter key
        self._stand_in_hooks: list = []  # removed when the op-level step ends
        # FSDP1's flat parameters as the model's parameters (`_record_parts`): flat key ->
        # [(part key, offset in this rank's shard or None, elements here)]; (flat key, index)
        # -> part key; module key -> {attribute: part key}.
        self._parts: dict[int, list] = {}
        self._sharded = False  # a model holds sharded parameters (see `_stand_ins`)
        self._part_keys: dict[tuple, int] = {}
        self._part_at: dict[int, dict[str, int]] = {}
        self._backward_depth = 0
        # The op log a reentrant checkpoint's recomputation in backward is recorded into.
        self._recompute = None
        self._backwards = 0
        self._scaler_depth = 0
        self._scaler_taken: dict[int, int] = {}  # optimizer key -> steps a GradScaler took

    # ---- identities -------------------------------------------------------------------
    def key(self, obj) -> int:
        i = id(obj)
        k = self._keys.get(i)
        if k is not None:
            ref = self._objs.get(k)
            if ref is not None and ref() is obj:
                return k
        self._next_key += 1
        k = self._next_key
        self._keys[i] = k
        try:
            self._objs[k] = weakref.ref(obj)
        except TypeError:
            pass
        return k

    def obj(self, key: int):
        ref = self._objs.get(key)
        return ref() if ref is not None else None

    # ---- start / finish ---------------------------------------------------------------
    def start(self):
        if self.active or self.done:
            return self
        self.active = True
        self.rec.set_env(torch.__version__, sys.version.split()[0], "cpu")
        if self._deep:
            _setitem_seen()  # before the script runs, not in its first step
        # torch warns that global module hooks (ours) fire twice around torch.compile'd modules.
        import warnings

        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
        from torch.nn.modules import module as module_mod
        from torch.optim import optimizer as optim_mod

        self._handles.append(module_mod.register_module_forward_pre_hook(self._forward_pre))
        # Which module holds which (the recorder keeps the links): a layer called directly is named
        # inside the outermost module holding it (a LightningModule's `self`, a local `model`).
        self._handles.append(module_mod.register_module_module_registration_hook(self._registered))
        self._handles.append(module_mod.register_module_forward_hook(self._forward_post, always_call=True))
        self._handles.append(optim_mod.register_optimizer_step_pre_hook(self._step_pre))
        self._handles.append(optim_mod.register_optimizer_step_post_hook(self._step_post))
        self._patch(torch.autograd, "backward", self._wrap_backward)
        self._patch(torch.autograd, "grad", self._wrap_grad)
        self._patch(torch.optim.Optimizer, "__init__", self._wrap_opt_init)
        self._patch(torch.optim.Optimizer, "zero_grad", self._wrap_zero_grad("optimizer"))
        self._patch(nn.Module, "zero_grad", self._wrap_zero_grad("module"))
        scaler = _versions.grad_scaler()
        if scaler is not None:
            self._patch(scaler, "step", self._wrap_scaler_step)
        self._patch(torch.nn.utils, "clip_grad_norm_", self._wrap_clip("max_norm"))
        self._patch(torch.nn.utils, "clip_grad_value_", self._wrap_clip("clip_value"))
        # Clipping by a norm computed apart (torch >= 2.6): Accelerate's `clip_grad_norm_`.
        self._patch(torch.nn.utils, "clip_grads_with_norm_", self._wrap_clip("max_norm"))
        self._patch(torch.Tensor, "register_hook", self._wrap_register_hook)
        for name in ("register_full_backward_hook", "register_backward_hook"):
            self._patch(nn.Module, name, self._wrap_module_backward_hook)
        self._patch(nn.Module, "load_state_dict", lambda o: self._wrap_load(o, whole=True))
        self._patch(nn.Module, "_load_from_state_dict", lambda o: self._wrap_load(o, whole=False))
        self._watch_freezing()
        self._watch_loader_writes()
        import multiprocessing.process

        self._patch(multiprocessing.process.BaseProcess, "start", self._wrap_process_start)
        mode = getattr(getattr(torch.autograd, "grad_mode", None), "inference_mode", None)
        if mode is not None:
            self._patch(mode, "__enter__", self._wrap_inference_enter)
        function = getattr(getattr(torch.autograd, "function", None), "Function", None)
        if function is not None and "apply" in function.__dict__:
            self._patch(function, "apply", self._wrap_function_apply)
        from torch.utils import checkpoint as checkpoint_mod

        reentrant = getattr(checkpoint_mod, "CheckpointFunction", None)
        if reentrant is not None:
            self._patch(reentrant, "forward", self._wrap_checkpoint_forward)
            self._patch(reentrant, "backward", self._wrap_checkpoint_backward)
        return self

    def _wrap_process_start(self, original):
        """Processes the script starts (`mp.Process`, `mp.spawn`): training done in them is
        not observed in this process, and the report says so (the recorder leaves DataLoader
        workers out)."""
        rec = self.rec

        def start(process):
            try:
                target = getattr(process, "_target", None)
                module = getattr(target, "__module__", "") or ""
                if module.startswith("torch.multiprocessing"):
                    # mp.spawn's wrapper: the user's function is its first argument.
                    args = getattr(process, "_args", ())
                    target = args[0] if args and callable(args[0]) else target
                    module = getattr(target, "__module__", "") or ""
                if target is not None:
                    name = getattr(target, "__qualname__", None) or type(target).__name__
                    method = getattr(process, "_start_method", None) or multiprocessing_method()
                    rec.child_process(name, module, method, site_of(sys._getframe(1)))
            except Exception:  # noqa: BLE001 - never break the user's process start
                pass
            return original(process)

        return start

    def _wrap_inference_enter(self, original):
        """Where `inference_mode` is entered: a model built or loaded under it has inference
        tensors for parameters, and training it fails in its first forward."""
        tracer = self

        def __enter__(ctx, *args, **kwargs):
            if tracer.active and getattr(ctx, "mode", True):
                tracer._inference_site = site_of(sys._getframe(1))
                tracer.rec.inference_entered(tracer._inference_site)
                if tracer._oplog is not None:
                    tracer._oplog.inference_entered()
            return original(ctx, *args, **kwargs)

        return __enter__

    def _wrap_function_apply(self, original):
        """A custom `autograd.Function` runs its forward with recording off and carries the
        gradient across in its own backward: the op log is told, so that a `detach()` or a
        no-grad op inside (an identity Function, DeepSpeed's ZeRO-3 linear) is not a cut.
        Its call is then shown to the log as one op, `<Function>.apply`: an output that needs
        no grad from inputs that do (`ctx.mark_non_differentiable`) is a cut at the user's line."""
        tracer = self
        fn = original.__func__ if isinstance(original, classmethod) else original
        names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

        def apply(cls, *args, **kwargs):
            log = tracer._oplog
            if log is None:
                return fn(cls, *args, **kwargs)
            name = getattr(cls, "__name__", "Function")
            log.function_entered(name)
            out = None
            try:
                out = fn(cls, *args, **kwargs)
            finally:
                log.function_exited(out)
            try:
                if (op := names.get(cls)) is None:
                    op = names[cls] = types.SimpleNamespace(__qualname__=f"{name}.apply")
                with own_ops():
                    drops = _drops_grad(args, out)
                if drops and tracer._oplog is log and tracer._mode is not None and not log.grads_only:
                    log.op(op, args, kwargs, out)
            except Exception as e:  # noqa: BLE001 - never break the user's forward
                tracer.rec.note(f"op log, {name}.apply: {e}")
            return out

        return classmethod(apply)

    def _wrap_checkpoint_forward(self, original):
        """Reentrant checkpointing (`use_reentrant=True`, Hugging Face's default) runs the layer
        without recording; when none of its inputs requires grad, its output has no history and
        nothing inside can learn. The op log is told while such a forward runs."""
        tracer = self
        fn = original.__func__ if isinstance(original, staticmethod) else original

        def forward(ctx, run_function, preserve_rng_state, *args):
            log = tracer._oplog
            marked = False
            if log is not None:
                try:
                    with own_ops():
                        marked = not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
                    if marked:
                        log.checkpoint_entered()
                except Exception:  # noqa: BLE001 - never break the user's forward
                    marked = False
            try:
                return fn(ctx, run_function, preserve_rng_state, *args)
            finally:
                if marked:
                    log.checkpoint_exited()

        return staticmethod(forward)

    def _wrap_checkpoint_backward(self, original):
        """Reentrant checkpointing builds a layer's graph only in backward, recomputing its
        forward there: a cut inside the layer (a `.detach()`, a value read out) exists only in
        that recomputation. In the op-level iteration the recomputed function runs under a
        recording mode (the checkpoint's own ops around it, the inputs it detaches, do not),
        and what it returned joins the loss (`OpLog.recomputed`) when backward is run
        through it."""
        tracer = self
        fn = original.__func__ if isinstance(original, staticmethod) else original

        def backward(ctx, *args):
            log = tracer._oplog
            run = getattr(ctx, "run_function", None)
            if log is None or run is None or tracer._mode is not None or tracer._recompute is not None:
                return fn(ctx, *args)

            def recompute(*a, **k):
                mode = None
                try:
                    mode = _make_op_mode(log, tracer.rec)
                    mode.__enter__()
                except Exception as e:  # noqa: BLE001 - never break the user's backward
                    tracer.rec.note(f"op log, checkpoint recomputation: {type(e).__name__}: {e}")
                try:
                    return run(*a, **k)
                finally:
                    if mode is not None:
                        try:
                            mode.__exit__(None, None, None)
                        except Exception as e:  # noqa: BLE001
                            tracer.rec.note(f"op log, checkpoint recomputation: {type(e).__name__}: {e}")

            ctx.run_function = recompute
            tracer._recompute = log
            try:
                return fn(ctx, *args)
            finally:
                tracer._recompute = None
                ctx.run_function = run

        return staticmethod(backward)

    def _watch_freezing(self):
        """Where parameters get frozen: `nn.Parameter` gets a `requires_grad` property (torch's
        own descriptor underneath) and a `requires_grad_` wrapper (which `Module.requires_grad_`
        calls) until the observation ends, so a frozen parameter is located at the line that
        froze it, not at the optimizer or the layer's definition."""
        base = next((c.__dict__["requires_grad"] for c in torch.Tensor.__mro__ if "requires_grad" in c.__dict__), None)
        if base is None or "requires_grad" in nn.Parameter.__dict__:
            return
        tracer = self

        def record(t, value, was, frame):
            try:
                site, via = _FRAMES.site_via(frame)
                by_owner = not value and in_owner_init(t, frame)
                tracer.rec.requires_grad_set(tracer.key(t), value, site, via, by_owner, was)
            except Exception as e:  # noqa: BLE001 - freezing must never fail because of us
                tracer.rec.note(f"requires_grad: {e}")

        def get(t):
            return base.__get__(t)

        def set_(t, value):
            was = base.__get__(t)
            base.__set__(t, value)
            if tracer.active and isinstance(value, bool):
                record(t, value, was, sys._getframe(1))

        original = torch.Tensor.requires_grad_

        def requires_grad_(t, requires_grad=True):
            was = base.__get__(t)
            out = original(t, requires_grad)
            if tracer.active:
                record(t, bool(requires_grad), was, sys._getframe(1))
            return out

        nn.Parameter.requires_grad = property(get, set_, doc=base.__doc__)  # type: ignore[assignment]
        nn.Parameter.requires_grad_ = requires_grad_  # type: ignore[method-assign]
        self._unpatch.append(lambda: (delattr(nn.Parameter, "requires_grad"), delattr(nn.Parameter, "requires_grad_")))

    def _watch_loader_writes(self):
        """Parameters a known checkpoint loader creates with the checkpoint's values in them
        (`_core.loader`): `nn.Parameter.__new__` is wrapped until the observation ends, the
        parameter returned is the one torch made."""
        original = nn.Parameter.__dict__.get("__new__")
        make = getattr(original, "__func__", original)
        if make is None:
            return
        tracer = self

        def new(cls, *args, **kwargs):
            p = make(cls, *args, **kwargs)
            if tracer.active and loader(sys._getframe(1)) is True:
                try:
                    tracer.rec.loaded(tracer.key(p))
                except Exception as e:  # noqa: BLE001 - never break the user's load
                    tracer.rec.note(f"checkpoint load: {type(e).__name__}: {e}")
            return p

        nn.Parameter.__new__ = staticmethod(new)  # type: ignore[method-assign,assignment]
        self._unpatch.append(lambda: setattr(nn.Parameter, "__new__", original))

    def _wrap_load(self, original, whole: bool):
        """Which parameters a checkpoint load writes: torch's `load_state_dict` and each
        module's `_load_from_state_dict` (which it, and transformers' older loader, call per
        module) take the entries named by the module's prefix. A model with loaded weights and
        a parameter outside them has that parameter freshly initialised."""
        tracer = self

        def load(module, state_dict, *args, **kwargs):
            out = original(module, state_dict, *args, **kwargs)
            if tracer.active and loader(sys._getframe(1)) is not False:
                try:
                    if whole:  # `load_state_dict`: names relative to the module
                        params = module.named_parameters()
                    else:
                        prefix = args[0] if args else kwargs.get("prefix", "")
                        params = ((prefix + n, p) for n, p in vars(module).get("_parameters", {}).items())
                    for name, p in params:
                        if p is not None and name in state_dict:
                            tracer.rec.loaded(tracer.key(p))
                except Exception as e:  # noqa: BLE001 - never break the user's load
                    tracer.rec.note(f"state dict load: {type(e).__name__}: {e}")
            return out

        return load

    def _patch(self, owner, name, make):
        original = owner.__dict__.get(name, getattr(owner, name, None))
        if original is None:
            return
        wrapped = make(original)
        try:
            wrapped.__wrapped__ = original
            wrapped.__name__ = getattr(original, "__name__", name)
            wrapped.__qualname__ = getattr(original, "__qualname__", name)
            wrapped.__doc__ = getattr(original, "__doc__", None)
        except (AttributeError, TypeError):
            pass
        setattr(owner, name, wrapped)
        self._patches.append((owner, name, original))

    def finish(self):
        """Removes every hook and patch and completes the capture. Safe to call twice."""
        if self.done:
            return
        self._end_deep()
        self.done = True
        self.active = False
        for h in self._handles:
            try:
                h.remove()
            except Exception:  # noqa: BLE001 - removing a hook must never break the script
                pass
        self._handles.clear()
        self._pop_pending()
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        self._patches.clear()
        for undo in reversed(self._unpatch):
            try:
                undo()
            except Exception:  # noqa: BLE001
                pass
        self._unpatch.clear()
        with own_ops():
            self._final_checks()
        if self.on_done is not None:
            self.on_done(self)

    def _final_checks(self):
        """The models as they are now, which weights changed, which are all zero."""
        try:
            self._final_scan()
        except Exception as e:  # noqa: BLE001
            self.rec.note(f"final scan failed: {type(e).__name__}: {e}")
        try:
            self._weight_changes()
        except Exception as e:  # noqa: BLE001
            self.rec.note(f"weight change check failed: {type(e).__name__}: {e}")
        try:
            # All-zero parameters (a zero-initialised layer that never changed) make every
            # gradient behind a product with them zero: the analysis says which.
            params = [(k, t) for k in self._scanned if isinstance(t := self.obj(k), nn.Parameter)]
            ns = norms([t.detach() for _, t in params])
            self.rec.zero_valued([k for (k, _), n in zip(params, ns) if n == 0.0])
        except Exception as e:  # noqa: BLE001
            self.rec.note(f"zero-valued check failed: {type(e).__name__}: {e}")

    def _progress(self, phase: str):
        if not self.active:
            return
        try:
            # "step N": the optimizer step of step N has finished (the count already moved on).
            self.rec.progress(self._step_number() - (phase == "step"), phase)
            if self.on_progress is not None:
                self.on_progress(self)
        except Exception as e:  # noqa: BLE001 - never break the user's step
            self.rec.note(f"progress: {type(e).__name__}: {e}")

    def _check_done(self):
        if self.done:
            return
        if self._opt_steps:
            # An optimizer that has not stepped yet may step less often than the others (a
            # generator updated once per five critic steps): wait for it, up to the cap below.
            waiting = any(k not in self._opt_steps and r() is not None for k, r in self._optimizers.items())
            if waiting and self._backwards < self.steps * 64:
                return
            if min(self._opt_steps.values()) >= self.steps and not self._calibrating():
                self.rec.progress(self.steps, "done")
                self.finish()
        elif not self._optimizers and self._backwards >= self.steps:
            self._finish_when_outside()
        elif self._backwards >= self.steps * 64:
            if not self._finish_pending:
                self.rec.note("observation ended after many backward calls without a completed optimizer step")
            self._finish_when_outside()

    def _calibrating(self) -> bool:
        """A GradScaler skipped some of an optimizer's steps: it is finding its scale (the first
        steps of fp16 training overflow and are skipped by design). Observation goes on until
        `steps` steps were taken, or for `_CALIBRATION` more calls: a scaler that never steps
        by then has gradients no scale makes finite (GS109)."""
        return any(n < self.steps for n in self._scaler_taken.values()) and max(
            self._opt_steps.values()
        ) < self.steps + _CALIBRATION

    def _finish_when_outside(self):
        """Finishes now, unless the op-level mode is inside an op (`backward()` and
        `autograd.grad` are ops to a TorchFunctionMode): torch pushes the mode back on its stack
        when the op returns, where nobody would pop it again and every later op of the run
        would pay for it. Then the next root forward, or optimizer step, finishes."""
        modes = [*self._pending_pop, self._mode]
        if any(m is not None and m.inside for m in modes):
            self._finish_pending = True
            return
        self.finish()

    # ---- op-level capture --------------------------------------------------------------
    def _enter_op_mode(self):
        try:
            from gradsleuth._core import OpLog

            if self._oplog is None:
                step = min(self._opt_steps.values()) + 1 if self._opt_steps else 1
                self._oplog = OpLog([_TORCH_DIR, _OWN_DIR], step, STDLIB_DIRS)
                self._deep_since = self.rec.backward_count
                self._deep_known = {}
            self._mode = _make_op_mode(self._oplog, self.rec)
            self._mode.__enter__()
            if not _setitem_seen() and "__setitem__" not in torch.Tensor.__dict__:
                self._setitem = _setitem_shim(self._mode)
                torch.Tensor.__setitem__ = self._setitem  # type: ignore[method-assign]
            _show_parameters(self._mode)
            if not torch.is_grad_enabled():
                self._oplog.grad_disabled_at_start()
        except Exception as e:  # noqa: BLE001 - without it we still have the cheap tier
            _show_parameters(None)
            self._mode = None
            self._deep = False
            self.rec.note(f"op-level capture unavailable: {type(e).__name__}: {e}")

    def _exit_op_mode(self):
        """Stops recording. Inside an op (`loss.backward()` is one) torch has popped the
        mode for the duration of the call, so it is popped later, outside any op."""
        mode, self._mode = self._mode, None
        if self._setitem is not None and torch.Tensor.__dict__.get("__setitem__") is self._setitem:
            del torch.Tensor.__setitem__
        self._setitem = None
        if mode is not None:
            mode.passive = True
            _show_parameters(None)
            self._pending_pop.append(mode)
        self._pop_pending()

    def _pop_pending(self):
        """Takes the passive modes that are not inside an op off the stack: popped when on
        top; one a user's mode went on above is taken out from under it (the modes above go
        back in their order), never the user's popped in its place."""
        while self._pending_pop and self._pending_pop[-1].inside == 0:
            mode = self._pending_pop.pop()
            try:
                if _on_top(mode):
                    mode.__exit__(None, None, None)
                else:
                    _take_off(mode)
            except Exception as e:  # noqa: BLE001
                self.rec.note(f"leaving op-level capture: {e}")

    def _end_deep(self, known=None):
        """The deep step is over: attribute unreached parameters to cuts, drop the op log.
        `known`: gradient norms already read this step (key -> norm), not read again."""
        self._exit_op_mode()
        log, self._oplog = self._oplog, None
        for h in self._stand_in_hooks:
            h.remove()
        self._stand_in_hooks.clear()
        self._deep = self._deep_all and not self.done
        if log is None:
            return
        try:
            # What its own optimizer's step read counts: a GAN's generator stepped, then
            # `zero_grad()`, before the discriminator's step ends the op-level step.
            known = {**self._deep_known, **(known or {})}
            self._deep_known = {}
            watched = [(k, t) for k in self._hooked if (t := self.obj(k)) is not None]
            parts = [pk for flat in self._parts.values() for pk, _, _ in flat]
            log.end_step(self.rec, self._deep_since, watched, parts, known)
        except Exception as e:  # noqa: BLE001
            self.rec.note(f"op-level resolve: {type(e).__name__}: {e}")
        log.clear()

    # ---- module hooks -----------------------------------------------------------------
    def _forward_pre(self, module, args):
        if not self.active:
            return None
        # A forward inside backward is activation checkpointing's recomputation of a layer
        # (reentrant or not): part of the backward in progress, not a new iteration.
        recompute = self._backward_depth > 0
        if self._finish_pending and self._depth == 0 and not recompute:
            self.finish()
            return None
        try:
            if self._depth == 0:
                # A call from the top (a recomputation too: its modules run again, recording).
                self._root_call += 1
                self.rec.root_call()
            if self._depth == 0 and not recompute:
                if self._t_iteration is None:
                    self._t_iteration = time.perf_counter()  # the first observed iteration starts
                self._progress("forward")
                if self._pending_pop:
                    self._pop_pending()
                if self._stepping is not None:
                    self._stepped()  # a step that raised, or this forward runs inside one (no closure)
                if self._oplog is not None:
                    self._oplog.grads_only = False
                if self._deep and self._mode is None:
                    self._enter_op_mode()
            with own_ops():  # the scan's reads are not the user's ops
                key = self.key(module)
                if self._depth == 0 and key not in self._roots:
                    # A layer of a model the user's code holds, called directly
                    # (`model.backbone(x)`): the model is what gets named and scanned.
                    frame = user_frame(sys._getframe(1))
                    owner = None
                    if key not in self._known_modules:
                        # Which model it is named and scanned as (decided in Rust: `root_owner`),
                        # from the module the registration links show holding it.
                        k = self.rec.holder(key)
                        owner = root_owner(module, self.obj(k) if k is not None else None, frame)
                    if owner is not None:
                        self.add_root(owner[1], name=owner[0])
                    else:
                        self.add_root(module, name=model_name(module, frame))
                    if self.on_root is not None:
                        self.on_root(module)
                elif self._depth > 0 and key not in self._known_modules:
                    self._orphan(module, key)
                self._depth += 1
                self._module_stack.append(key)
                if self._oplog is not None:
                    self._oplog.set_module(key)
                    if self._sharded:
                        self._stand_ins(module, key)
                if self._last_call.get(key) != self._root_call:
                    first_run = key not in self._last_call
                    self._last_call[key] = self._root_call
                    self.rec.module_ran(key, torch.is_grad_enabled(), not self._sharded and swapped(module))
                    if first_run:
                        self.rec.module_site(key, site_of(sys._getframe(1)))
        except Exception as e:  # noqa: BLE001 - never break the user's forward
            self.rec.note(f"forward hook: {type(e).__name__}: {e}")
        return None

    def _stand_ins(self, module, mkey):
        """Tensors a module runs on in place of its registered, sharded parameters: FSDP1 with
        `use_orig_params` puts views of the unsharded flat parameter in `_parameters` for the
        forward, without it in plain attributes (`_record_parts`), FSDP2 an unsharded leaf.
        A cut behind one is charged to the parameter it stands for; a gradient reaching one
        reached it (the parameter's own accumulation hook never fires). Anything else put
        there (`functional_call`'s tensors) is the user's."""
        for name, t in module._parameters.items():
            if t is None or not t.requires_grad:
                continue
            pkey = self._param_at.get((mkey, name))
            p = self.obj(pkey) if pkey is not None else None
            if p is None or p is t:
                continue
            if getattr(p, "_local_tensor", None) is None and not getattr(p, "_fsdp_flattened", False):
                continue
            if t.grad_fn is not None and (t._base is None or not t._base.is_leaf):
                continue
            self._stand_in(t, id(p), pkey)
        parts = self._part_at.get(mkey)
        if parts:
            held = vars(module)
            for name, pk in parts.items():
                t = held.get(name)
                if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None:
                    self._stand_in(t, pk, pk)

    def _stand_in(self, t, addr, pkey):
        self._oplog.stand_in(t, addr)
        self._stand_in_hooks.append(t.register_hook(lambda _g, _k=pkey, _rec=self.rec: _rec.reached(_k)))

    def _registered(self, parent, name, child):
        try:
            self.rec.module_registered(self.key(parent), name, None if child is None else self.key(child))
        except Exception as e:  # noqa: BLE001 - never break the user's model construction
            self.rec.note(f"module registration hook: {type(e).__name__}: {e}")
        return None

    def _forward_post(self, module, args, output):
        if self._depth > 0 and self._module_stack:
            self._depth -= 1
            self._module_stack.pop()
            if self._oplog is not None:
                try:
                    self._oplog.set_module(self._module_stack[-1] if self._module_stack else None)
                except Exception:  # noqa: BLE001 - never break the user's forward
                    pass
        return None

    def _orphan(self, module, key):
        """A module running inside a model's forward that belongs to no scanned model (grouped
        by class and call site in Rust: `Recorder.orphan`)."""
        site = site_of(sys._getframe(2))
        parent = self._module_stack[-1] if self._module_stack else None
        new_instance = True
        okey, new_group = self.rec.orphan(
            key=key,
            class_id=id(type(module)),
            class_=type(module).__name__,
            site=site,
            parent=parent,
            class_def=class_def(type(module)),
            forward_def=forward_def(type(module)),
        )
        if new_group:
            for name, p in module.named_parameters():
                self.rec.orphan_param(
                    group=okey,
                    key=self.key(p),
                    attr=name,
                    shape=list(p.shape),
                    dtype=str(p.dtype).replace("torch.", ""),
                    requires_grad=p.requires_grad,
                    is_leaf=p.is_leaf,
                )
        self._orphan_objs.setdefault(okey, []).append(weakref.ref(module))
        self._known_modules.add(key)
        self._known_modules.add(id(module))
        if okey != key:
            # Later instances: count them, and let their runs count for the first record.
            self._keys[id(module)] = okey
            self._objs[okey] = weakref.ref(module)
        self.rec.orphan_call(okey, site, new_instance)

    # ---- model scan -------------------------------------------------------------------
    def add_root(self, module, name=None, frame=None):
        key = self.key(module)
        if name is None:
            name = model_name(module, user_frame(frame))
        self._roots[key] = weakref.ref(module)
        self._root_names[key] = name
        self._inference_keys = []
        self._scan(module, key, prefix="", hook=True)
        self._find_copies(module)
        if self._inference_keys:
            # Parameters made under `inference_mode` can never be trained: no backward can
            # record through them ("Inference tensors cannot be saved for backward").
            self.rec.add_cut(
                kind="no_grad",
                op="torch.inference_mode",
                site=self._inference_site,
                params=self._inference_keys,
                step=self._step_number(),
            )

    def _find_copies(self, root):
        """An engine holding an optimizer that updates flat copies of its model's parameters
        (DeepSpeed's ZeRO and mixed-precision optimizers, held as `engine.optimizer`): the
        inner torch optimizer's parameters are partitions of a flat buffer, copied back to the
        model after the wrapper's `step()`. The inner optimizer is reported as holding the
        model's parameters, and its step is measured around the wrapper's."""
        wrapper = vars(root).get("optimizer")
        inner = getattr(wrapper, "optimizer", None)
        if wrapper is None or not isinstance(inner, torch.optim.Optimizer) or wrapper is inner:
            return
        attr = next((a for a in _COPY_GROUPS if getattr(wrapper, a, None)), None)
        okey = self.key(inner)
        if attr is None or okey in self._copies:
            return
        self._copies[okey] = (weakref.ref(wrapper), attr)
        self._optimizers.setdefault(okey, weakref.ref(inner))
        original = wrapper.step
        tracer = self

        def step(*args, **kwargs):
            out = original(*args, **kwargs)
            if tracer.active and okey in tracer._copy_stepped:
                tracer._copy_stepped.discard(okey)  # the inner step ran (not skipped on overflow)
                tracer._step_done(inner)
            return out

        wrapper.step = step
        self._unpatch.append(lambda: vars(wrapper).pop("step", None))

    def _rebuilt(self) -> set[int]:
        """Keys of orphan modules seen as several objects (rebuilt on every call)."""
        return {k for k, refs in self._orphan_objs.items() if len(refs) > 1}

    def _scan(self, root, rkey, prefix, hook):
        rec = self.rec
        strip = unwrapped_name(root)
        names: dict[int, str] = {}
        owner_of: dict[int, int] = {}
        rebuilt = self._rebuilt()
        skip_params: set[int] = set()
        for raw, m in root.named_modules(remove_duplicate=True):
            mkey = self.key(m)
            mname = strip(raw)
            if mkey in rebuilt:
                # The latest copy of a layer rebuilt in forward: it stays reported as such,
                # named where the model registers it.
                names[id(m)] = mname
                skip_params.update(id(p) for p in m.parameters())
                rec.orphan_registered(mkey, prefix + mname)
                continue
            names[id(m)] = mname
            self._known_modules.add(mkey)
            parent_name, _, attr = raw.rpartition(".")
            parent = None if m is root else self.key(root.get_submodule(parent_name)) if parent_name else rkey
            rec.module(
                key=mkey,
                class_=type(m).__name__,
                root=rkey,
                name=(prefix + mname) if mname else self._root_names.get(rkey, ""),
                parent=parent,
                attr=attr,
                kind=ModuleKind.ROOT if m is root else ModuleKind.REGISTERED,
                class_def=class_def(type(m)),
                forward_def=forward_def(type(m)),
            )
            for p in m._parameters.values():
                if p is not None and id(p) not in owner_of:
                    owner_of[id(p)] = mkey
        # What the model registers: a list or view of these (FSDP1's flat parameter in its
        # `params`, its original parameters as views of it) is the model's own, not hidden.
        self._registered_ids = {id(p) for p in root.parameters()}
        for pname, p in root.named_parameters():
            if id(p) in skip_params or p.is_meta:
                # No values to train: a template that `functional_call` runs on the tensors
                # that train (recorded as the script's own).
                continue
            tkey = self.key(p)
            if getattr(p, "_is_flat_param", False) and getattr(p, "_param_infos", None):
                self._record_parts(p, tkey, prefix + strip(pname).rpartition(".")[0])
                continue
            attr = pname.rpartition(".")[2]
            owner = owner_of.get(id(p))
            self._param_at[(owner, attr)] = tkey
            self._tensor(p, tkey, prefix + strip(pname), TensorKind.PARAM, owner, attr, hook)
        for mname, m in root.named_modules(remove_duplicate=True):
            mkey = self.key(m)
            mname = strip(mname)
            for bname, b in m._buffers.items():
                if b is not None and (b.requires_grad or isinstance(b, nn.Parameter)):
                    qual = f"{mname}.{bname}" if mname else bname
                    self._tensor(b, self.key(b), prefix + qual, TensorKind.BUFFER, mkey, bname, hook)
            self._scan_attributes(m, mkey, rkey, prefix + (mname + "." if mname else ""), names, hook)

    def _record_parts(self, flat, fkey, unit):
        """FSDP1 without `use_orig_params`: each unit trains one flat parameter holding the
        model's parameters end to end (this rank's shard of it). Each of those is recorded as
        the model names it (`unit.fqn`) and measured on its stretch of the flat parameter and
        of its gradient; one not on this rank has no elements here. The flat parameter itself
        is storage. A part has no object: its key stands for its address (see `_stand_ins`)."""
        parts = []
        for i, (fqn, attr, module, shape, offset, numel) in enumerate(flat_parts(flat)):
            pk = self._part_keys.get((fkey, i))
            if pk is None:
                self._next_key += 1
                pk = self._part_keys[(fkey, i)] = self._next_key
            mkey = self.key(module)
            self._scanned.add(pk)
            self.rec.tensor(
                key=pk,
                name=f"{unit}.{fqn}" if unit else fqn,
                kind=TensorKind.PARAM,
                module=mkey,
                attr=attr,
                shape=list(shape),
                dtype=_dtype(flat),
                requires_grad=flat.requires_grad,
                is_leaf=True,
                is_parameter=True,
            )
            self.rec.tensor_shard(pk, numel)
            self._part_at.setdefault(mkey, {})[attr] = pk
            parts.append((pk, offset, numel))
        self._parts[fkey] = parts
        self._sharded = True

    def _split_flat(self, keys, tensors):
        """`keys`/`tensors` with each flat parameter (or its gradient) replaced by its parts'
        stretches on this rank (see `_record_parts`)."""
        if not self._parts:
            return keys, tensors
        out_k, out_t = [], []
        for k, t in zip(keys, tensors):
            parts = self._parts.get(k)
            if parts is None:
                out_k.append(k)
                out_t.append(t)
                continue
            for pk, offset, numel in parts:
                if offset is not None:
                    out_k.append(pk)
                    out_t.append(t.narrow(0, offset, numel))
        return out_k, out_t

    def _scan_attributes(self, m, mkey, rkey, qual, names, hook):
        for attr, value in vars(m).items():
            if attr.startswith("_") or attr == "training":
                continue
            if isinstance(value, torch.Tensor):
                if value.requires_grad:
                    self._attribute_tensor(value, mkey, qual + attr, attr, hook)
            elif isinstance(value, (list, tuple, dict)):
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for i, item in list(items)[:1000]:
                    # Named as `named_parameters()` will name them once registered
                    # (`nn.ModuleList` / `nn.ModuleDict`): `heads.0`, `experts.short`.
                    label = f"{attr}.{i}"
                    if isinstance(item, nn.Module):
                        if id(item) in names:
                            continue  # an alias of a registered module
                        self._container_module(item, mkey, rkey, qual + label, label, hook)
                    elif isinstance(item, torch.Tensor) and item.requires_grad and item.is_leaf:
                        if id(item) in self._registered_ids or getattr(item, "_is_flat_param", False):
                            continue  # a list of the model's own parameters, or FSDP1's storage
                        self._tensor(item, self.key(item), qual + label, TensorKind.CONTAINER, mkey, label, hook)

    def _container_module(self, cm, owner, rkey, qual, label, hook):
        for sub_name, sub in cm.named_modules():
            skey = self.key(sub)
            self._known_modules.add(skey)
            self.rec.module(
                key=skey,
                class_=type(sub).__name__,
                root=rkey,
                name=qual + ("." + sub_name if sub_name else ""),
                parent=owner if sub is cm else self.key(cm),
                attr=label if sub is cm else sub_name,
                kind=ModuleKind.CONTAINER,
                class_def=class_def(type(sub)),
                forward_def=forward_def(type(sub)),
            )
        for pname, p in cm.named_parameters():
            self._tensor(p, self.key(p), f"{qual}.{pname}", TensorKind.CONTAINER, owner, f"{label}.{pname}", hook)

    def _attribute_tensor(self, t, mkey, qual, attr, hook):
        base = t._base
        if base is not None and (id(base) in self._registered_ids or getattr(base, "_is_flat_param", False)):
            # A view of a registered parameter (FSDP1's original parameters): asked for its
            # `grad_fn` (`is_leaf` is) after FSDP rewrote the flat parameter in place, it raises.
            return
        if t.is_leaf:
            self._tensor(t, self.key(t), qual, TensorKind.ATTRIBUTE, mkey, attr, hook)
            return
        from gradsleuth._core import grad_fn_chain

        leaf = leaf_behind(t)
        if leaf is not None and (id(leaf) in self._registered_ids or getattr(leaf, "_is_flat_param", False)):
            return  # a view of a registered parameter (FSDP1's original parameters)
        chain = grad_fn_chain(t.grad_fn) if t.grad_fn is not None else []
        leaf_key = None
        if leaf is not None:
            leaf_key = self.key(leaf)
            self._tensor(leaf, leaf_key, qual + " (hidden leaf)", TensorKind.HIDDEN, mkey, attr, hook)
        self.rec.tensor(
            key=self.key(t),
            name=qual,
            kind=TensorKind.ATTRIBUTE,
            module=mkey,
            attr=attr,
            shape=list(t.shape),
            dtype=_dtype(t),
            requires_grad=t.requires_grad,
            is_leaf=False,
            is_parameter=isinstance(t, nn.Parameter),
            chain=chain,
            leaf=leaf_key,
        )

    def _tensor(self, t, tkey, name, kind, module, attr, hook):
        self._scanned.add(tkey)
        if hook and t.requires_grad and t.is_inference():
            self._inference_keys.append(tkey)
        self.rec.tensor(
            key=tkey,
            name=name,
            kind=kind,
            module=module,
            attr=attr,
            shape=list(t.shape),
            dtype=_dtype(t),
            requires_grad=t.requires_grad,
            is_leaf=t.is_leaf,
            is_parameter=isinstance(t, nn.Parameter),
        )
        if getattr(t, "_is_hf_initialized", False) is True:  # loaded by transformers' from_pretrained
            self.rec.loaded(tkey)
        local = getattr(t, "_local_tensor", None)  # an FSDP2 DTensor's shard on this rank
        if local is not None:
            self._sharded = True
            self.rec.tensor_shard(tkey, local.numel())
        elif getattr(t, "_fsdp_flattened", False) and not getattr(t, "_is_flat_param", False):
            # FSDP1 with `use_orig_params`: a view of this rank's shard of the flat parameter
            # (no elements when its values live on other ranks)
            self._sharded = True
            self.rec.tensor_shard(tkey, t.numel())
        if hook:
            self._hook_reached(t, tkey, name)

    def _hook_reached(self, t, tkey, name):
        """Marks the tensor reached when a backward accumulates its gradient (once per tensor)."""
        if not (t.requires_grad and t.is_leaf) or tkey in self._hooked:
            return
        self._hooked.add(tkey)
        rec = self.rec

        def reached(t, _key=tkey):
            # torch runs the hook with no gradient too, when a custom Function's backward
            # returns None for this input: nothing reached it.
            if t.grad is not None:
                rec.reached(_key)

        try:
            self._handles.append(t.register_post_accumulate_grad_hook(reached))
        except RuntimeError as e:
            self.rec.note(f"cannot hook {name}: {e}")

    def _final_scan(self):
        roots = [(k, r()) for k, r in self._roots.items()]
        roots = [(k, m) for k, m in roots if m is not None]
        # Orphans still alive and seen once are models in their own right (a teacher called
        # inside a student's forward); rebuilt ones stay orphans.
        for okey, refs in self._orphan_objs.items():
            alive = [r() for r in refs if r() is not None]
            if len(refs) == 1 and alive:
                m = alive[0]
                self._roots[okey] = weakref.ref(m)
                self._root_names[okey] = type(m).__name__
                roots.append((okey, m))
        # A root inside another root's tree is not a model of its own; names carry their
        # model's name when more than one with parameters remains (decided in Rust).
        tops, multi = models_of_their_own(roots)
        earlier, self._scanned = self._scanned, set()
        for k, m in tops:
            self._scan(m, k, prefix=(self._root_names[k] + ".") if multi else "", hook=False)
        # Registered earlier, not part of any model now: replaced layers, or the stand-ins
        # torch.func.functional_call and torch.export swap in. Not a trained parameter that
        # died with its model (a model and optimizer local to `main()`, which returned before
        # the report): that model ended as it was, nothing replaced it.
        alive = {k for k, _ in roots}
        orphan_tensors = {k for k in earlier if self.rec.is_orphan_tensor(k)}
        for k in earlier - self._scanned - orphan_tensors:
            root = self.rec.tensor_root(k)
            ended = (
                self.obj(k) is None
                and root is not None
                and root not in alive
                and self.rec.tensor_optimized(k)
            )
            if not ended:
                self.rec.retire(k)
        for okey, ref in self._optimizers.items():
            opt = ref()
            if opt is not None:
                self._register_optimizer(opt, okey)

    # ---- optimizers -------------------------------------------------------------------
    def _wrap_opt_init(self, original):
        tracer = self

        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if tracer.active:
                try:
                    okey = tracer.key(self)
                    tracer._optimizers[okey] = weakref.ref(self)
                    site, via = _FRAMES.site_via(sys._getframe(1))
                    tracer._opt_sites[okey] = site
                    tracer._free_tensors(self, sys._getframe(1), by_script=via is None)
                except Exception as e:  # noqa: BLE001
                    tracer.rec.note(f"optimizer init: {e}")

        return __init__

    def add_optimizer(self, opt, frame=None):
        okey = self.key(opt)
        self._optimizers[okey] = weakref.ref(opt)
        self._opt_sites[okey] = site_of(frame) if frame is not None else (None, None, None)
        self._register_optimizer(opt, okey)

    def _free_tensors(self, opt, frame, by_script=False):
        """An optimizer's tensors are watched for a gradient from its creation on: one on no
        model is a parameter of the script itself (`w = torch.randn(..., requires_grad=True)`,
        torch.func's stacked ensemble), judged as any parameter once the step shows it used.
        Named by the variable (or the entry of a dict, list or tuple) the creating code binds it
        to. `by_script`: the script's own code built the optimizer (no library's code between)."""
        names = bound_names(user_frame(frame))
        own = False
        for j, p in enumerate(p for g in opt.param_groups for p in g["params"]):
            pkey = self.key(p)
            if pkey not in self._free_names and id(p) not in names:
                self._unnamed[id(p)] = pkey  # named at the first backward, if its frame binds it
            name = self._free_names.setdefault(pkey, names.get(id(p)) or f"{type(opt).__name__}.param{j}")
            self._hook_reached(p, pkey, name)
            own = own or ((by_script or id(p) in names) and not isinstance(p, nn.Parameter))
        if own and self._deep and self._mode is None and self._oplog is None:
            # The script's own tensors, of no module, may be used by no module's forward (the
            # op-level step starts at a model's call otherwise): it starts now, so an op cutting
            # them off is seen. They are the script's when it binds them to a name or built the
            # optimizer itself (`SGD(make_params())`); a library's internal copies (DeepSpeed's
            # flat parameters) do not start it.
            self._enter_op_mode()

    def _name_unnamed(self, frame):
        """An optimizer's tensors no name bound when it was built (`SGD(make_params())`) get
        the names the frame running the first backward binds them to (`w, b = ...`)."""
        unnamed, self._unnamed = self._unnamed, {}
        if not unnamed:
            return
        names = bound_names(user_frame(frame))
        for i, pkey in unnamed.items():
            t = self.obj(pkey)
            if i in names and t is not None and id(t) == i and not self.rec.has_tensor(pkey):
                self._free_names[pkey] = names[i]

    def _register_optimizer(self, opt, okey):
        params, lrs = [], []
        for group in opt.param_groups:
            lr = group.get("lr", 0.0)
            lrs.append(float(lr) if not isinstance(lr, torch.Tensor) else float(lr.item()))
        for p in self._opt_params(opt):
            pkey = self.key(p)
            parts = self._parts.get(pkey)
            if parts is not None:
                params.extend(pk for pk, _, _ in parts)
                continue
            if not self.rec.has_tensor(pkey):
                self.rec.tensor(
                    key=pkey,
                    name=self._free_names.get(pkey, "<optimizer tensor>"),
                    kind=TensorKind.FOREIGN,
                    module=None,
                    attr="",
                    shape=list(p.shape),
                    dtype=_dtype(p),
                    requires_grad=p.requires_grad,
                    is_leaf=p.is_leaf,
                    is_parameter=isinstance(p, nn.Parameter),
                )
            params.append(pkey)
            self._opt_keys_held.add(pkey)
        # Group sizes only when `params` lists the groups' tensors one for one (no FSDP parts,
        # no wrapper's copies).
        sizes = [len(g["params"]) for g in opt.param_groups]
        if sum(sizes) != len(params):
            sizes = []
        site = self._opt_sites.get(okey, (None, None, None))
        self.rec.optimizer(okey, type(opt).__name__, site, params, lrs, group_sizes=sizes)
        return params

    def _opt_params(self, opt):
        copies = self._copies.get(self.key(opt))
        wrapper = copies[0]() if copies is not None else None
        if wrapper is not None:
            return [p for g in getattr(wrapper, copies[1]) for p in g]
        return [p for g in opt.param_groups for p in g["params"]]

    def _step_pre(self, opt, args, kwargs):
        if not self.active:
            return None
        if self._pending_pop:
            self._pop_pending()
        try:
            with own_ops():
                self._measure_before(opt)
                mode = self._mode
                if mode is not None and not mode.passive and self.key(opt) not in self._copies:
                    # What the step writes in place is recorded after it. Without a closure
                    # (`args` are step's own, the optimizer first) no forward runs inside, and
                    # its own ops, under no_grad, pass the mode unrecorded.
                    quiet = (args[1] if len(args) > 1 else kwargs.get("closure")) is None
                    versions = [(p, p._version) for p in self._opt_params(opt)]
                    mode.passive = quiet
                    # Off the stack for the step (when on top): an op that passes a passive
                    # mode still costs a round trip through it (Adam's step took 1.9x as long).
                    depth = _lift(mode) if quiet else None
                    self._stepping = (mode, opt, versions, quiet, depth)
        except Exception as e:  # noqa: BLE001
            self.rec.note(f"step pre-hook: {type(e).__name__}: {e}")
        return None

    def _stepped(self, opt=None):
        """`opt`'s step is over (None: a forward starts inside a step without a closure, or
        after one that raised): the mode records again, and the parameters whose versions the
        step changed go to the op log as its in-place writes (`OpLog.optimizer_step`): a graph
        still to be backpropagated may have saved one."""
        stepping = self._stepping
        if stepping is None or (opt is not None and stepping[1] is not opt) or (opt is None and not stepping[3]):
            return
        self._stepping = None
        by_forward = opt is None
        mode, opt, versions, _, depth = stepping
        if self._mode is not mode:
            return
        if depth is not None and not _put_back(mode, depth):
            if by_forward:
                # A forward inside the step, under a mode the step entered: it runs unrecorded
                # (ours on top would be what that mode's exit pops); the step's end tries again.
                self._stepping = stepping
                return
            self.rec.note("op-level capture: a function mode entered inside an optimizer step stayed on")
            self._exit_op_mode()
            return
        mode.passive = False
        if self._oplog is not None:
            with own_ops():
                changed = [(p, self.key(p)) for p, v in versions if p._version != v]
                self._oplog.optimizer_step(f"{type(opt).__name__}.step()", changed)

    def _measure_before(self, opt):
        """Weight norms (and, the first time, bit fingerprints) before `opt`'s step."""
        okey = self.key(opt)
        if okey not in self._optimizers:
            self._optimizers[okey] = weakref.ref(opt)
            self._opt_sites.setdefault(okey, (None, None, None))
        # Its parameters as group sizes: a group added mid-run (progressive unfreezing's
        # `add_param_group`) is measured from the step it joins.
        shape = tuple(len(g["params"]) for g in opt.param_groups)
        if self._opt_steps.get(okey) is None or okey not in self._weights_after or self._opt_shape.get(okey) != shape:
            self._opt_shape[okey] = shape
            self._register_optimizer(opt, okey)
            params = self._opt_params(opt)
            keys, weights = self._split_flat([self.key(p) for p in params], [p.detach() for p in params])
            before = dict(zip(keys, norms(weights)))
            bits = self._bits_before.setdefault(okey, {})
            new = [(k, w) for k, w in zip(keys, weights) if k not in bits]
            bits.update(zip([k for k, _ in new], fingerprints([w for _, w in new])))
        else:
            before = self._weights_after[okey]
        self.rec.step_pre(okey, list(before.items()))
        if okey in self._copies:
            self._copy_stepped.add(okey)

    def _step_post(self, opt, args, kwargs):
        if self._stepping is not None:
            try:
                self._stepped(opt)
            except Exception as e:  # noqa: BLE001
                self.rec.note(f"step post-hook: {type(e).__name__}: {e}")
        if not self.active or self.key(opt) in self._copies:
            return  # an optimizer of copies: measured after its wrapper's step (_find_copies)
        self._step_done(opt)

    def _step_done(self, opt):
        """Gradient and weight norms in one fused reduction. `step()` leaves `.grad` as it
        was, so these are the gradients the step used (unscaled, under GradScaler)."""
        op_level = self._oplog is not None
        try:
            with own_ops():
                self._measure_after(opt)
        except Exception as e:  # noqa: BLE001
            self.rec.note(f"step post-hook: {type(e).__name__}: {e}")
        if self._scaler_depth == 0:
            if self._t_iteration is not None:  # what observing this iteration cost, in wall time
                now = time.perf_counter()
                self.rec.step_time(now - self._t_iteration, op_level)
                self._t_iteration = now
            self._progress("step")
            self._check_done()

    def _measure_after(self, opt):
        """Gradient and weight norms after `opt`'s step; ends the op-level step after the first
        iteration."""
        okey = self.key(opt)
        params = self._opt_params(opt)
        keys = [self.key(p) for p in params]
        grads = [(k, p.grad) for k, p in zip(keys, params) if p.grad is not None]
        if not self._deep and len(grads) < len(keys) and not self._rearmed and okey not in self._copies:
            # A parameter reached in an earlier step has no gradient now: trace the next
            # step at op level to find where its path to the loss was cut.
            missing = {k for k, p in zip(keys, params) if p.grad is None and p.requires_grad}
            if missing & set(self.rec.reached_keys()):
                self._deep = True
                self._rearmed = True
        grad_keys, grad_ts = self._split_flat([k for k, _ in grads], [g for _, g in grads])
        keys, weights = self._split_flat(keys, [p.detach() for p in params])
        ns = norms(grad_ts + weights)
        grad_norms = dict(zip(grad_keys, ns[: len(grad_ts)]))
        if self._oplog is not None:
            self._deep_known.update(grad_norms)
        after = dict(zip(keys, ns[len(grad_ts) :]))
        self._weights_after[okey] = after
        self.rec.step_post(okey, [(k, grad_norms.get(k)) for k in keys], list(after.items()))
        self._steps_seen[okey] = self._steps_seen.get(okey, 0) + 1
        if self._scaler_depth == 0:
            self._opt_steps[okey] = self._opt_steps.get(okey, 0) + 1
        if self._deep and self._oplog is not None and (self._deep_all or self._first_iteration_done()):
            self._end_deep(grad_norms)

    # ---- gradient clipping and hooks ---------------------------------------------------
    def _step_number(self) -> int:
        return (min(self._opt_steps.values()) if self._opt_steps else self._backwards) + 1

    def _say_once(self, kind, site, op, keys):
        if (kind, site) in self._said:
            return
        self._said.add((kind, site))
        self.rec.add_cut(
            kind=kind,
            op=op,
            site=site,
            params=keys,
            step=self._step_number(),
        )

    def _keys_upstream(self, t) -> list:
        """Tracked leaves `t` depends on: itself, or those its graph reaches."""
        k = self._keys.get(id(t))
        if k is not None and self.obj(k) is t:
            return [k]
        return self._keys_behind(getattr(t, "grad_fn", None))

    def _keys_behind(self, node) -> list:
        """Tracked leaves the autograd graph from `node` reaches."""
        if node is None:
            return []
        from gradsleuth._core import walk

        return [k for leaf in walk(node, 1_000_000)["leaves"] if (k := self._keys.get(leaf)) is not None]

    def _wrap_clip(self, bound_name):
        tracer = self

        def make(original):
            def clip(parameters, *args, **kwargs):
                if not tracer.active:
                    return original(parameters, *args, **kwargs)
                params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
                out = original(params, *args, **kwargs)
                try:
                    bound = args[0] if args else kwargs.get(bound_name)
                    if bound is not None and float(bound) == 0.0:
                        keys = [k for k in (tracer._keys.get(id(p)) for p in params) if k is not None]
                        # The call the user made, when a library clips for it.
                        op = _FRAMES.callee_name(sys._getframe(1)) or original.__name__
                        tracer._say_once("grad_clip", site_of(sys._getframe(1)), op, keys)
                except Exception as e:  # noqa: BLE001
                    tracer.rec.note(f"clip: {e}")
                return out

            return clip

        return make

    def _wrap_register_hook(self, original):
        tracer = self

        def register_hook(tensor, hook):
            if not tracer.active:
                return original(tensor, hook)
            site = site_of(sys._getframe(1))
            tref = weakref.ref(tensor)
            tensor_id = tracer.key(tensor)

            def observed(grad, _hook=hook):
                out = _hook(grad)
                # Judged once per tensor: a hook registered in a loop over parameters is one
                # cause (the Recorder joins the reports of one line) naming every tensor. Only
                # a non-zero incoming gradient can be judged: at the first step a zero-initialised
                # head (torchvision's ViT, LoRA's B) sends zeros to everything below it.
                gate = ("grad_hook", site, tensor_id)
                if tracer.active and isinstance(out, torch.Tensor) and gate not in tracer._said:
                    try:
                        if bool(grad.any()):
                            tracer._said.add(gate)
                        if gate in tracer._said and not bool(out.any()):
                            t = tref()
                            keys = tracer._keys_upstream(t) if t is not None else []
                            tracer.rec.add_cut(
                                kind="grad_hook",
                                op="register_hook",
                                site=site,
                                params=keys,
                                step=tracer._step_number(),
                            )
                    except Exception as e:  # noqa: BLE001
                        tracer.rec.note(f"hook: {e}")
                return out

            return original(tensor, observed)

        return register_hook

    def _wrap_module_backward_hook(self, original):
        """A module backward hook that returns zeros for `grad_input`: everything before the
        module gets an exactly zero gradient (GS212, as a tensor hook). The autograd nodes of
        the module's inputs at its last call say which parameters are before it; they are held
        only until that call's backward (or the end of observation)."""
        tracer = self

        def register(module, hook, *args, **kwargs):
            if not tracer.active:
                return original(module, hook, *args, **kwargs)
            site = site_of(sys._getframe(1))
            # What the module's last call took: a tracked leaf's key, or the autograd node
            # behind an input (the input tensor object itself may be gone by its backward).
            inputs: list = []

            def remember(_m, args):
                if tracer.active:
                    inputs[:] = [
                        k if (k := tracer._keys.get(id(a))) is not None and tracer.obj(k) is a else a.grad_fn
                        for a in args
                        if isinstance(a, torch.Tensor) and a.requires_grad
                    ]

            tracer._handles.append(module.register_forward_pre_hook(remember))
            tracer._unpatch.append(inputs.clear)

            def observed(m, grad_input, grad_output, _hook=hook):
                out = _hook(m, grad_input, grad_output)
                gate = ("grad_hook", site, id(m))
                if tracer.active and isinstance(out, (tuple, list)) and gate not in tracer._said:
                    try:
                        given = [g for g in grad_input if isinstance(g, torch.Tensor)]
                        if given and any(bool(g.any()) for g in given):
                            tracer._said.add(gate)
                            keys = [k for x in inputs for k in ([x] if isinstance(x, int) else tracer._keys_behind(x))]
                            if keys and not any(isinstance(g, torch.Tensor) and bool(g.any()) for g in out):
                                tracer.rec.add_cut(
                                    kind="grad_hook",
                                    op=getattr(original, "__name__", "register_full_backward_hook"),
                                    site=site,
                                    params=keys,
                                    step=tracer._step_number(),
                                )
                    except Exception as e:  # noqa: BLE001
                        tracer.rec.note(f"module hook: {e}")
                inputs.clear()
                return out

            return original(module, observed, *args, **kwargs)

        return register

    def _weight_changes(self):
        """Fingerprints now against before the first observed step, per optimizer param."""
        for okey, before in self._bits_before.items():
            opt = self.obj(okey)
            if opt is None:
                continue
            after = self._fingerprints(opt)
            self.rec.weight_changes([(k, v != before[k]) for k, v in after.items() if k in before])
        if self._bits_unheld and not self._optimizers:
            held = [(k, t) for k in self._bits_unheld if (t := self.obj(k)) is not None]
            after = dict(zip([k for k, _ in held], fingerprints([t.detach() for _, t in held])))
            self.rec.weight_changes([(k, v != self._bits_unheld[k]) for k, v in after.items()])

    def _fingerprints(self, opt) -> dict:
        """Bit fingerprints of `opt`'s parameters, by key."""
        params = self._opt_params(opt)
        return dict(zip([self.key(p) for p in params], fingerprints([p.detach() for p in params])))

    def _fingerprint_unstepped(self):
        """Bit fingerprints of the parameters of optimizers that have not stepped yet, once
        each, after a backward: if one never steps, the end of the run shows whether anything
        else changed its weights (a manual update) or nothing did."""
        try:
            with own_ops():
                for okey, ref in list(self._optimizers.items()):
                    opt = ref()
                    if opt is not None and okey not in self._bits_before:
                        self._bits_before[okey] = self._fingerprints(opt)
        except Exception as e:  # noqa: BLE001
            self.rec.note(f"fingerprints after backward: {type(e).__name__}: {e}")

    def _fingerprint_unheld(self, keys=None):
        """With no optimizer yet, bit fingerprints of the parameters the first backward gave a
        gradient (`keys`: those `autograd.grad` returned one for, which it does not store):
        the end of observation shows whether the script's own update changed them."""
        try:
            with own_ops():
                held = [
                    (k, t)
                    for k in (self._hooked if keys is None else keys)
                    if isinstance(t := self.obj(k), nn.Parameter) and (keys is not None or t.grad is not None)
                ]
                bits = fingerprints([t.detach() for _, t in held])
                self._bits_unheld = dict(zip([k for k, _ in held], bits))
        except Exception as e:  # noqa: BLE001
            self.rec.note(f"fingerprints after backward: {type(e).__name__}: {e}")

    def _first_iteration_done(self) -> bool:
        """Every optimizer created so far has stepped at least once."""
        live = [k for k, r in self._optimizers.items() if r() is not None]
        return bool(live) and all(self._steps_seen.get(k, 0) >= 1 or self._opt_steps.get(k, 0) >= 1 for k in live)

    def _wrap_zero_grad(self, target):
        tracer = self

        def make(original):
            def zero_grad(self, *args, **kwargs):
                if tracer.active:
                    try:
                        tracer.rec.zero_grad(target, tracer.key(self), site_of(sys._getframe(1)))
                    except Exception:  # noqa: BLE001
                        pass
                return original(self, *args, **kwargs)

            return zero_grad

        return make

    def _wrap_scaler_step(self, original):
        tracer = self

        def step(self, optimizer, *args, **kwargs):
            if not tracer.active:
                return original(self, optimizer, *args, **kwargs)
            okey = tracer.key(optimizer)
            before = tracer._steps_seen.get(okey, 0)
            tracer._scaler_depth += 1
            try:
                return original(self, optimizer, *args, **kwargs)
            finally:
                tracer._scaler_depth -= 1
                try:
                    stepped = tracer._steps_seen.get(okey, 0) > before
                    tracer._scaler_taken[okey] = tracer._scaler_taken.get(okey, 0) + stepped
                    scale = float(self.get_scale()) if self.is_enabled() else None
                    tracer.rec.scaler_step(okey, stepped, scale, site_of(sys._getframe(1)))
                    tracer._opt_steps[okey] = tracer._opt_steps.get(okey, 0) + 1
                    if tracer._deep and tracer._oplog is not None and tracer._first_iteration_done():
                        tracer._end_deep()
                except Exception as e:  # noqa: BLE001
                    tracer.rec.note(f"scaler step: {e}")
                tracer._check_done()

        return step

    # ---- backward ---------------------------------------------------------------------
    def _wrap_backward(self, original):
        tracer = self

        def backward(tensors, *args, **kwargs):
            if not tracer.active or tracer._backward_depth > 0:
                if tracer._recompute is not None:
                    # A reentrant checkpoint's recomputed outputs: the loss depends on them.
                    try:
                        with own_ops():
                            for t in tensors if isinstance(tensors, (list, tuple)) else [tensors]:
                                tracer._recompute.recomputed(t)
                    except Exception as e:  # noqa: BLE001
                        tracer.rec.note(f"op log, checkpoint recomputation: {type(e).__name__}: {e}")
                return original(tensors, *args, **kwargs)
            first = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
            with own_ops():
                gf = getattr(first, "grad_fn", None)
                tracer._before_backward(first)
            site = site_of(sys._getframe(1))
            if tracer._first_backward_site is None:
                tracer._first_backward_site = site
                tracer._name_unnamed(sys._getframe(1))
            tracer.rec.backward_begin("backward", site, type(gf).__name__ if gf is not None else None)
            tracer._progress("backward")
            tracer._backward_depth += 1
            try:
                result = original(tensors, *args, **kwargs)
            except BaseException as e:
                tracer._backward_depth -= 1
                tracer._backward_failed(e, site)
                raise
            tracer._backward_depth -= 1
            with own_ops():
                tracer._after_backward()
            return result

        return backward

    def _before_backward(self, loss):
        if self._mode is not None:
            self._exit_op_mode()
        if self.rec.probe and isinstance(loss, torch.Tensor):
            self.rec.loss_value(loss)
        if self._oplog is not None and isinstance(loss, torch.Tensor):
            try:
                self._oplog.loss(loss)
            except Exception as e:  # noqa: BLE001
                self.rec.note(f"op-level loss: {e}")
            try:
                t0 = time.perf_counter()
                keys = {i: k for i, k in self._keys.items() if k in self._hooked}
                self._oplog.graph(self.rec, loss, keys)
                self.graph_seconds = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001
                self.rec.note(f"graph snapshot: {e}")

    def _backward_failed(self, e, site=(None, None, None)):
        self.rec.backward_end([], f"{type(e).__name__}: {e}")
        if "backward through the graph a second time" in str(e):
            self.rec.add_cut(
                kind="stale_tensor",
                op="backward",
                site=site,
                params=[],
                related=self._first_backward_site or (None, None, None),
                related_message="an earlier backward freed that graph",
                step=self._step_number(),
            )
        if self._oplog is None and not self.done:
            # A failure in a cheap step: trace the next step at op level.
            self._deep = True
        if self._oplog is not None:
            try:
                self._oplog.explain_error(self.rec, str(e))
            except Exception as err:  # noqa: BLE001
                self.rec.note(f"op-level error match: {err}")
        self._end_deep()

    def _after_backward(self):
        if len(self._bits_before) < len(self._optimizers):
            self._fingerprint_unstepped()
        elif not self._optimizers and not self._bits_unheld:
            self._fingerprint_unheld()
        try:
            # Gradient norms for reached tensors that no optimizer holds (optimizer-held ones
            # are measured right before their step).
            todo = []
            for k in set(self._hooked) - self._opt_keys_held:
                t = self.obj(k)
                if t is not None and t.grad is not None:
                    todo.append((k, t.grad))
            ns = norms([g for _, g in todo])
            self.rec.backward_end([(k, n) for (k, _), n in zip(todo, ns)])
        except Exception as e:  # noqa: BLE001
            self.rec.backward_end([], None)
            self.rec.note(f"after backward: {e}")
        self._backwards += 1
        if self._deep and not self._optimizers:
            self._end_deep()
        self._check_done()
        if (
            self.active
            and self._deep
            and self._oplog is not None
            and self._mode is None
            and self._watch_gradients
            and _no_user_mode()
        ):
            # Until the next forward or the step, the script's reads and writes of gradients
            # (`p.grad = None` before `step()` is why a weight does not move).
            self._oplog.grads_only = True
            self._enter_op_mode()

    def _wrap_grad(self, original):
        tracer = self

        def grad(outputs, inputs, *args, **kwargs):
            if not tracer.active or tracer._backward_depth > 0:
                return original(outputs, inputs, *args, **kwargs)
            first = outputs[0] if isinstance(outputs, (list, tuple)) and outputs else outputs
            gf = getattr(first, "grad_fn", None)
            site = site_of(sys._getframe(1))
            tracer.rec.backward_begin("grad", site, type(gf).__name__ if gf is not None else None)
            tracer._backward_depth += 1
            try:
                result = original(outputs, inputs, *args, **kwargs)
            except BaseException as e:
                tracer._backward_depth -= 1
                # What it was asked to differentiate is the step's loss, as for `backward()`: a
                # cut of every path to it ("does not require grad") is found in the op log.
                with own_ops():
                    tracer._before_backward(first)
                tracer._backward_failed(e, site)
                raise
            tracer._backward_depth -= 1
            create_graph = kwargs.get("create_graph", args[2] if len(args) > 2 else False)
            if create_graph:
                tracer._derivative(outputs, result)
            try:
                ins = inputs if isinstance(inputs, (list, tuple)) else [inputs]
                pairs = [(tracer._keys.get(id(t)), g) for t, g in zip(ins, result)]
                got = [(k, g) for k, g in pairs if k is not None and g is not None]
                for k, _ in got:
                    tracer.rec.reached(k)
                if not tracer._optimizers and not tracer._bits_unheld:
                    tracer._fingerprint_unheld([k for k, _ in got])
                ns = norms([g.detach() for _, g in got])
                tracer.rec.backward_end([(k, n) for (k, _), n in zip(got, ns)])
            except Exception as e:  # noqa: BLE001
                tracer.rec.backward_end([], None)
                tracer.rec.note(f"after autograd.grad: {e}")
            tracer._backwards += 1
            tracer._check_done()
            return result

        return grad

    def _derivative(self, outputs, result):
        """Which tracked tensors the outputs of `autograd.grad(create_graph=True)` depend on,
        and which its derivatives still do (the difference is decided in Rust)."""
        try:
            outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            upstream = [k for t in outs if isinstance(t, torch.Tensor) for k in self._keys_upstream(t)]
            kept = [k for g in result if isinstance(g, torch.Tensor) for k in self._keys_upstream(g)]
            self.rec.derivative(upstream, kept)
        except Exception as e:  # noqa: BLE001
            self.rec.note(f"derivative: {e}")


def _drops_grad(args, out) -> bool:
    """A tensor argument needs grad and a tensor output does not: the call cut the graph."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args) and any(
        isinstance(o, torch.Tensor) and not o.requires_grad for o in outs
    )


def _on_top(mode) -> bool:
    """`mode` is the innermost function mode (its `__exit__` pops whatever is)."""
    try:
        from torch.overrides import _get_current_function_mode

        return _get_current_function_mode() is mode
    except Exception:  # noqa: BLE001 - a torch without it: pop as entered
        return True


_SETITEM_SEEN: bool | None = None


def _setitem_seen() -> bool:
    """Whether a function mode sees `t[idx] = v` between plain tensors. Torch 2.1 asks only a
    subclass then (`THPVariable_setitem` checks `!THPVariable_CheckExact`), so the op log would
    miss a write into a buffer and what `out[mask] += y` gives `out`. Asked of the torch in
    hand, once. (Its `t[idx]` is missed too, but a Python `Tensor.__getitem__` would make every
    tensor a sequence to torch's C code: `torch.tensor([t0, t1])` fails on 0-d tensors.)"""
    global _SETITEM_SEEN
    if _SETITEM_SEEN is None:
        from torch.overrides import TorchFunctionMode

        seen = []

        class _Probe(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                seen.append(func)
                return func(*args, **(kwargs or {}))

        # Asked with every mode of the user's off the stack: none of them sees the probe (nor
        # is it `own_ops()`, which would hide it from the probe's own mode too).
        C, held = torch._C, []
        try:
            while C._len_torch_function_stack() > 0:
                held.append(C._pop_torch_function_stack())
            t, i, v = torch.zeros(2), torch.zeros(1, dtype=torch.long), torch.ones(1)
            with _Probe():
                t[i] = v
        except Exception:  # noqa: BLE001 - a torch without these: leave its indexing alone
            seen.append(None)
        finally:
            for m in reversed(held):
                C._push_on_torch_function_stack(m)
        _SETITEM_SEEN = bool(seen)
    return _SETITEM_SEEN


def _setitem_shim(mode):
    """What `torch.Tensor.__setitem__` is while `mode` records on a torch whose modes do not
    see `t[idx] = v` on a plain tensor: the write goes to the innermost mode as on a newer torch
    (which calls the base class's with the mode off, so nothing is seen twice) when `mode` is
    that mode; anything else is the base class's write, untouched."""
    base = (getattr(torch._C, "TensorBase", None) or torch._C._TensorBase).__setitem__
    plain = torch.Tensor
    handle = torch.overrides.handle_torch_function

    def __setitem__(self, index, value):
        if type(self) is plain and not mode.passive and _on_top(mode):
            handle(base, (self,), self, index, value)
        else:
            base(self, index, value)

    return __setitem__


def _lift(mode) -> int | None:
    """Takes `mode` off the function-mode stack when it is on top and not inside an op: the
    stack's depth without it, for `_put_back`; None when it stays."""
    C = torch._C
    try:
        if mode.inside or not _on_top(mode):
            return None
        C._pop_torch_function_stack()
        return C._len_torch_function_stack()
    except Exception:  # noqa: BLE001 - a torch without these: the mode stays, passive
        return None


def _put_back(mode, depth: int) -> bool:
    """Puts a mode `_lift` took off back on top, unless the stack changed meanwhile (a mode
    entered and left on inside the step): then it stays off (False)."""
    C = torch._C
    if C._len_torch_function_stack() != depth:
        return False
    C._push_on_torch_function_stack(mode)
    return True


def _take_off(mode) -> None:
    """Takes `mode` off the function-mode stack from under the modes above it, which go back
    on in their order (a mode's `__exit__` would pop the top one, another's)."""
    C = torch._C
    above = []
    try:
        while C._len_torch_function_stack() > 0:
            top = C._pop_torch_function_stack()
            if top is mode:
                break
            above.append(top)
    finally:
        for m in reversed(above):
            C._push_on_torch_function_stack(m)


def _no_user_mode() -> bool:
    """No function mode of anyone else is active, nor is this call inside one's handler
    (torch pops a mode while its `__torch_function__` runs, so a mode pushed there would sit
    below it once the handler returns, and come off the stack out of order). Ours is native:
    a Python `__torch_function__` frame above this one is somebody else's."""
    try:
        if torch._C._len_torch_function_stack() != 0:
            return False
    except Exception:  # noqa: BLE001 - an old torch without it: only the frames say
        pass
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "__torch_function__":
            return False
        frame = frame.f_back
    return True


def _dtype(t) -> str:
    return str(t.dtype).replace("torch.", "")


def flat_parts(flat):
    """The parameters an FSDP1 flat parameter holds end to end, in order: (fqn, attr, module,
    shape, offset, numel) with their stretch of this rank's shard (offset None and numel 0 when
    the shard holds none of it)."""
    layout = zip(flat._fqns, flat._param_infos, flat._shapes, flat._shard_param_infos)
    for fqn, (attr, module, _), shape, shard in layout:
        if shard.in_shard:
            yield fqn, attr, module, shape, shard.offset_in_shard, shard.numel_in_shard or 0
        else:
            yield fqn, attr, module, shape, None, 0


# Scaler calls observed beyond the requested steps while a GradScaler has not taken them yet
# (`Tracer._calibrating`): halving each time, a default scale (65536) reaches 1e-5 within 32.
_CALIBRATION = 32

# Attributes holding the model's parameters, by group, on DeepSpeed's optimizers that update
# flat copies of them (ZeRO stages 1-2, stage 3, bf16).
_COPY_GROUPS = ("bit16_groups", "fp16_groups", "bf16_groups")

def unwrapped_name(root) -> Callable[[str], str]:
    """Renames a dotted name inside `root` as inside the user's model: the wrappers around it
    and around its layers named away (in Rust: `gradsleuth_capture::names`)."""
    wrap = wrapper_prefix(root)
    return lambda name: unwrapped(name, wrap)


_PARAMETER_NEW = nn.Parameter.__dict__["__new__"]


def _parameter(data, requires_grad, cls=nn.Parameter):
    return _PARAMETER_NEW.__func__(cls, data, requires_grad)


_parameter.__qualname__ = "nn.Parameter"


def _show_parameters(mode):
    """While `mode` records (None: no longer), `nn.Parameter(t)` reaches it as an op: making a
    Parameter calls no torch function a mode sees, and `nn.Parameter(h)` of an activation
    copies it into a new leaf, cutting what made it off the loss. The Parameter made is the
    same either way."""
    if mode is None:
        nn.Parameter.__new__ = _PARAMETER_NEW
        return

    def __new__(cls, data=None, requires_grad=True):
        if not isinstance(data, torch.Tensor) or mode.passive:
            return _PARAMETER_NEW.__func__(cls, data, requires_grad)
        return mode.__torch_function__(_parameter, (), (data, requires_grad), {"cls": cls})

    nn.Parameter.__new__ = staticmethod(__new__)


_OP_MODE: list = []  # the mode class, made once (a class per deep step costs its creation and cycles)


def _make_op_mode(log, rec):
    """The TorchFunctionMode of the deep step. Its `__torch_function__` is the native
    `OpCall` bound to it (torch requires a method of the mode): it calls the op, then forwards
    it to the Rust op log, and no Python frame of ours sits between the user's line and the op
    (a warning the op raises keeps the user's location). Nothing the log does can change what
    the op returns or raises."""
    if not _OP_MODE:
        from torch.overrides import TorchFunctionMode

        from gradsleuth._core import OpCall

        class _OpMode(TorchFunctionMode):
            def __init__(self, log, rec):
                super().__init__()
                self.call = OpCall(log, rec)
                self.call.bind(self)
                self.__torch_function__ = self.call  # type: ignore[method-assign]

            @property
            def inside(self) -> int:
                return self.call.inside

            @property
            def passive(self) -> bool:
                return self.call.passive

            @passive.setter
            def passive(self, value: bool) -> None:
                self.call.passive = value

        _OP_MODE.append(_OpMode)
    return _OP_MODE[0](log, rec)
