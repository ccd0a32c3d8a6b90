"""What differs between the torch versions gradsleuth supports (2.1 to 2.15), in one place.

The oldest supported torch, and why, is Rust's (`gradsleuth_capture::support`); `make compat`
runs every function here on torch 2.1, 2.4, 2.8, 2.12 and 2.15. Each function takes the API
where it exists and says, next to its fallback, which versions lack it.
"""

from __future__ import annotations

import torch

# Turns off `__torch_function__` dispatch, modes included (torch 2.0 made
# `DisableTorchFunction` disable modes as well as subclasses; `DisableTorchFunctionSubclass`
# is the subclass-only one). Present in every supported torch.
_DISABLE_TORCH_FUNCTION = torch._C.DisableTorchFunction

# The C base class of `torch.Tensor`: `_TensorBase` on torch 2.1-2.2, `TensorBase` from 2.3.
TENSOR_BASES = ("TensorBase", "_TensorBase")


def is_tensor_class(owner) -> bool:
    """`owner` is `torch.Tensor` or its C base (a method's `__objclass__`)."""
    return owner is torch.Tensor or getattr(owner, "__name__", "") in TENSOR_BASES


def grad_scaler():
    """The GradScaler class users have: `torch.amp.GradScaler` from 2.3 (CUDA's derives from
    it), `torch.cuda.amp.GradScaler` before."""
    amp = getattr(torch, "amp", None)
    cuda_amp = getattr(getattr(torch, "cuda", None), "amp", None)
    return getattr(amp, "GradScaler", None) or getattr(cuda_amp, "GradScaler", None)


def is_compiling() -> bool:
    """Inside torch.compile's tracing: `torch.compiler.is_compiling` from 2.3, dynamo's own
    before (imported only if the program already did: nothing compiles without it)."""
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if compiling is not None:
        return bool(compiling())
    dynamo = getattr(torch, "_dynamo", None)
    return bool(dynamo is not None and hasattr(dynamo, "is_compiling") and dynamo.is_compiling())


def global_forward_hook_with_kwargs(hook):
    """`hook(module, args, kwargs, output)` on every module's forward; torch without keyword
    arguments in global forward hooks calls it with empty kwargs."""
    from torch.nn.modules import module as module_mod

    try:
        return module_mod.register_module_forward_hook(hook, with_kwargs=True)
    except TypeError:
        return module_mod.register_module_forward_hook(lambda m, a, o: hook(m, a, {}, o))


def own_ops():
    """A context for gradsleuth's own tensor reads and reductions (a model scan, the norms
    around a step): they bypass every TorchFunctionMode, the op-level step's own and the
    user's (an op counter, `with torch.device(...)`), so a mode sees the user's program only,
    and they cost no dispatch through a mode. Inside, a subclass's `__torch_function__` is
    skipped too; `__torch_dispatch__` subclasses (DTensor) are unaffected."""
    return _DISABLE_TORCH_FUNCTION()
