//! The op log's Python side: [`PyHost`] answers `gradsleuth_capture::Host` over live Python
//! objects (tensors, `grad_fn` nodes, frames), and [`OpLog`] is the class the tracer's
//! `TorchFunctionMode` forwards every op of the deep step to. The analysis itself (cuts,
//! taint, attribution) is `gradsleuth_capture::oplog`.

use gradsleuth_capture::oplog::{step_end, Call, Callee, Host, InplaceTarget, SeqKind};
use gradsleuth_capture::Site;
use gradsleuth_graph::GraphSource;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use rustc_hash::FxHashMap;

use crate::frames::FrameWalker;
use crate::graph::Live;
use crate::Recorder;

/// Proof that an address still holds the object an entry was made for: a weak reference
/// (tensors, arrays), or a strong one for objects that cannot be weakly referenced (floats,
/// lists), which keeps them alive until the step ends.
pub enum Keeper {
    Weak(Py<PyAny>),
    Strong(#[allow(dead_code)] Py<PyAny>),
}

/// The torch and sys callables the host reads through, looked up once.
struct Handles {
    tensor_type: Py<PyAny>,
    is_grad_enabled: Py<PyAny>,
    getframe: Py<PyAny>,
    sequence_nr: Py<PyAny>,
    /// `torch._C._FunctionBase`: a custom Function's node (see [`crate::graph::pin`]).
    function_base: Py<PyAny>,
    /// `torch._C._functorch`'s `is_functorch_wrapped_tensor` and `get_unwrapped`.
    functorch: Option<(Py<PyAny>, Py<PyAny>)>,
}

/// `gradsleuth_capture::Host` over live objects, for the length of one call from Python.
pub struct PyHost<'py, 'a> {
    py: Python<'py>,
    live: Live<'py>,
    handles: &'a Handles,
    frames: &'a mut FrameWalker,
}

impl<'py> GraphSource for PyHost<'py, '_> {
    type Node = Bound<'py, PyAny>;
    type Id = usize;
    type Error = PyErr;

    fn id(&self, node: &Self::Node) -> usize {
        self.live.id(node)
    }

    fn children(&mut self, node: &Self::Node, out: &mut Vec<Self::Node>) -> PyResult<()> {
        self.live.children(node, out)
    }

    fn leaf(&mut self, node: &Self::Node) -> PyResult<Option<u64>> {
        self.live.leaf(node)
    }
}

impl<'py> Host for PyHost<'py, '_> {
    type Value = Bound<'py, PyAny>;
    type Keeper = Keeper;
    type Kept = Py<PyAny>;

    fn addr(&self, v: &Self::Value) -> usize {
        v.as_ptr() as usize
    }

    fn keep(&self, v: &Self::Value) -> Keeper {
        match pyo3::types::PyWeakrefReference::new(v) {
            Ok(w) => Keeper::Weak(w.into_any().unbind()),
            Err(_) => Keeper::Strong(v.clone().unbind()),
        }
    }

    fn holds(&self, k: &Keeper, v: &Self::Value) -> bool {
        match k {
            Keeper::Strong(_) => true,
            Keeper::Weak(w) => w
                .bind(self.py)
                .call0()
                .is_ok_and(|o| o.as_ptr() == v.as_ptr()),
        }
    }

    fn is_tensor(&self, v: &Self::Value) -> bool {
        v.is_instance(self.handles.tensor_type.bind(self.py))
            .unwrap_or(false)
    }

    fn items(
        &self,
        v: &Self::Value,
        tuple_limit: usize,
        list_limit: usize,
    ) -> Option<(SeqKind, Vec<Self::Value>)> {
        if let Ok(t) = v.cast::<PyTuple>() {
            Some((SeqKind::Tuple, t.iter().take(tuple_limit).collect()))
        } else if let Ok(l) = v.cast::<PyList>() {
            Some((SeqKind::List, l.iter().take(list_limit).collect()))
        } else {
            None
        }
    }

    fn truthy(&self, v: &Self::Value) -> Option<bool> {
        v.is_truthy().ok()
    }

    fn requires_grad(&self, t: &Self::Value) -> PyResult<bool> {
        t.getattr(pyo3::intern!(self.py, "requires_grad"))?
            .is_truthy()
    }

    fn grad_fn(&self, t: &Self::Value) -> PyResult<Option<Py<PyAny>>> {
        let g = t.getattr(pyo3::intern!(self.py, "grad_fn"))?;
        if g.is_none() {
            return Ok(None);
        }
        let base = self.handles.function_base.bind(self.py);
        if base.is_none() {
            return Ok(Some(g.unbind()));
        }
        Ok(Some(crate::graph::pin(g, base).unbind()))
    }

    fn node(&self, kept: &Py<PyAny>) -> Self::Node {
        kept.bind(self.py).clone()
    }

    fn node_name(&self, n: &Self::Node) -> String {
        let n = crate::graph::unpin(n);
        n.get_type()
            .name()
            .map(|s| s.to_string())
            .unwrap_or_default()
    }

    fn node_sequence_nr(&self, n: &Self::Node) -> Option<u64> {
        let n = crate::graph::unpin(n);
        n.call_method0(pyo3::intern!(self.py, "_sequence_nr"))
            .and_then(|s| s.extract::<u64>())
            .ok()
    }

    fn grad_enabled(&self) -> PyResult<bool> {
        self.handles
            .is_grad_enabled
            .bind(self.py)
            .call0()?
            .is_truthy()
    }

    fn sequence_nr(&self) -> Option<u64> {
        self.handles
            .sequence_nr
            .bind(self.py)
            .call0()
            .and_then(|s| s.extract::<u64>())
            .ok()
    }

    fn stack(&mut self, depth: usize) -> Vec<Site> {
        // From the innermost Python frame: the mode's call is native (`OpCall`), and the walk
        // skips gradsleuth's and torch's own frames wherever it is called from.
        match self.handles.getframe.bind(self.py).call1((0,)) {
            Ok(frame) => self
                .frames
                .walk(frame, depth)
                .into_iter()
                .map(|(s, _)| s)
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    fn callee(&mut self) -> Option<Callee> {
        let frame = self.handles.getframe.bind(self.py).call1((0,)).ok()?;
        self.frames.callee(frame)
    }

    fn func_names(&self, f: &Self::Value) -> (String, Option<String>) {
        let qual: String = f
            .getattr("__qualname__")
            .or_else(|_| f.getattr("__name__"))
            .and_then(|n| n.extract())
            .unwrap_or_else(|_| "<op>".to_owned());
        // `Tensor.data` arrives as the descriptor's `__get__`: named by its owner.
        let owner: Option<String> = f
            .getattr("__self__")
            .ok()
            .and_then(|s| s.getattr("__name__").ok())
            .and_then(|n| n.extract().ok());
        (qual, owner)
    }

    fn inplace_target(&self, t: &Self::Value) -> InplaceTarget {
        let version: u64 = t.getattr("_version").and_then(|v| v.extract()).unwrap_or(0);
        let grad_fn = t.getattr("grad_fn").ok().filter(|g| !g.is_none());
        let node = grad_fn
            .as_ref()
            .and_then(|g| g.get_type().name().ok().map(|s| s.to_string()));
        let prev_node = grad_fn
            .and_then(|g| g.getattr("next_functions").ok())
            .and_then(|n| n.get_item(0).ok())
            .and_then(|e| e.get_item(0).ok())
            .filter(|n| !n.is_none())
            .and_then(|n| n.get_type().name().ok().map(|s| s.to_string()));
        let shape: Vec<i64> = t
            .getattr("shape")
            .and_then(|s| s.extract())
            .unwrap_or_default();
        InplaceTarget {
            version,
            node,
            prev_node,
            shape,
        }
    }

    fn is_float(&self, v: &Self::Value) -> bool {
        v.is_exact_instance_of::<pyo3::types::PyFloat>()
    }

    fn numel(&self, t: &Self::Value) -> u64 {
        t.getattr(pyo3::intern!(self.py, "shape"))
            .and_then(|s| s.extract::<Vec<u64>>())
            .map_or(0, |s| s.iter().product())
    }

    fn inner(&self, t: &Self::Value) -> Option<Self::Value> {
        let (wrapped, unwrap) = self.handles.functorch.as_ref()?;
        let is = wrapped.bind(self.py).call1((t,)).ok()?.is_truthy().ok()?;
        if !is {
            return None;
        }
        unwrap.bind(self.py).call1((t,)).ok()
    }
}

/// The op log of one deep step.
#[pyclass(module = "gradsleuth._core")]
pub struct OpLog {
    log: gradsleuth_capture::OpLog<Keeper, Py<PyAny>>,
    handles: Handles,
    frames: FrameWalker,
    /// gradsleuth's own package folder: ops its hooks make are not the user's (probe runs).
    own_dir: Option<String>,
}

impl OpLog {
    /// The log and a host over this call's objects.
    fn split<'py>(
        &mut self,
        py: Python<'py>,
    ) -> (
        &mut gradsleuth_capture::OpLog<Keeper, Py<PyAny>>,
        PyHost<'py, '_>,
    ) {
        let host = PyHost {
            py,
            live: Live::new(py),
            handles: &self.handles,
            frames: &mut self.frames,
        };
        (&mut self.log, host)
    }
}

impl OpLog {
    /// A probe run: the op's outputs summarised, with the user's line that called it.
    fn digest(
        &mut self,
        py: Python<'_>,
        recorder: &mut gradsleuth_capture::Recorder,
        func: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
    ) {
        // An op called by gradsleuth's own hooks (reading a parameter's shape, registering a
        // hook) is not part of the user's step.
        if let Some(own) = &self.own_dir {
            let caller: Option<String> = self
                .handles
                .getframe
                .bind(py)
                .call1((0,))
                .and_then(|f| f.getattr("f_code"))
                .and_then(|c| c.getattr("co_filename"))
                .and_then(|n| n.extract())
                .ok();
            if caller.is_some_and(|c| c.starts_with(own.as_str())) {
                return;
            }
        }
        let tensor_type = self.handles.tensor_type.bind(py).clone();
        let outputs = crate::probe::digests(py, out, &tensor_type);
        // A result with no tensor and no number (a hook handle, None, a profiler record)
        // has no value that could differ.
        if outputs.is_empty() {
            return;
        }
        let (_, mut host) = self.split(py);
        let (qual, owner) = host.func_names(func);
        // A property read (`t.data`) arrives as its descriptor's `__get__`, named by the
        // attribute; `TensorBase` is what users call `Tensor`.
        let name = match owner {
            Some(o) if qual.ends_with(".__get__") => format!("Tensor.{o}"),
            Some(o) if !qual.contains('.') => format!("{o}.{qual}"),
            _ => qual,
        };
        let name = match name.strip_prefix("TensorBase.") {
            Some(rest) => format!("Tensor.{rest}"),
            None => name,
        };
        let site = host.stack(1).into_iter().next();
        recorder.op_digest(name, site.as_ref(), outputs);
    }
}

#[pymethods]
impl OpLog {
    #[new]
    #[pyo3(signature = (skip_prefixes, step, library_prefixes=Vec::new()))]
    fn new(
        py: Python<'_>,
        skip_prefixes: Vec<String>,
        step: u32,
        library_prefixes: Vec<String>,
    ) -> PyResult<Self> {
        let torch = py.import("torch")?;
        Ok(OpLog {
            log: gradsleuth_capture::OpLog::new(step),
            handles: Handles {
                tensor_type: torch.getattr("Tensor")?.unbind(),
                is_grad_enabled: torch.getattr("is_grad_enabled")?.unbind(),
                getframe: py.import("sys")?.getattr("_getframe")?.unbind(),
                sequence_nr: py
                    .import("torch._C._autograd")?
                    .getattr("_get_sequence_nr")?
                    .unbind(),
                function_base: torch
                    .getattr("_C")?
                    .getattr("_FunctionBase")
                    .unwrap_or_else(|_| py.None().into_bound(py))
                    .unbind(),
                functorch: py.import("torch._C._functorch").ok().and_then(|f| {
                    let wrapped = f.getattr("is_functorch_wrapped_tensor").ok()?;
                    Some((wrapped.unbind(), f.getattr("get_unwrapped").ok()?.unbind()))
                }),
            },
            frames: FrameWalker::new(skip_prefixes, library_prefixes),
            own_dir: py
                .import("gradsleuth")
                .and_then(|m| m.getattr("__file__"))
                .and_then(|f| f.extract::<String>())
                .ok()
                .and_then(|f| {
                    std::path::Path::new(&f)
                        .parent()
                        .map(|d| format!("{}/", d.display()))
                }),
        })
    }

    #[getter]
    fn ops(&self) -> u64 {
        self.log.ops
    }

    #[getter]
    fn errors(&self) -> u64 {
        self.log.errors
    }

    /// The module whose forward is running now (set by the tracer's module hooks).
    #[pyo3(signature = (key))]
    fn set_module(&mut self, py: Python<'_>, key: Option<u64>) {
        let (log, host) = self.split(py);
        log.set_module(&host, key);
    }

    /// Snapshot of the autograd graph behind `loss` into the capture (at most `budget` nodes).
    /// `keys`: id(tensor) -> parameter key.
    #[pyo3(signature = (recorder, loss, keys, budget=250_000))]
    fn graph(
        &mut self,
        py: Python<'_>,
        mut recorder: PyRefMut<'_, Recorder>,
        loss: Bound<'_, PyAny>,
        keys: FxHashMap<usize, u64>,
        budget: usize,
    ) -> PyResult<()> {
        let (log, mut host) = self.split(py);
        log.graph(&mut host, &mut recorder.inner, &loss, &keys, budget)
    }

    /// One op: `func(*args, **kwargs)` returned `out`; `dropped` is the first argument's
    /// `grad_fn` read before an op that drops it in place (`detach_`). Never raises.
    #[pyo3(signature = (func, args, kwargs, out, dropped=None))]
    fn op(
        &mut self,
        py: Python<'_>,
        func: Bound<'_, PyAny>,
        args: Bound<'_, PyTuple>,
        kwargs: Option<Bound<'_, PyDict>>,
        out: Bound<'_, PyAny>,
        dropped: Option<Bound<'_, PyAny>>,
    ) {
        let inplace_kwarg = kwargs
            .as_ref()
            .and_then(|kw| kw.get_item("inplace").ok().flatten())
            .is_some_and(|v| v.is_truthy().unwrap_or(false));
        let call = Call {
            func,
            args: args.iter().collect(),
            kwargs: kwargs
                .map(|kw| kw.values().iter().collect())
                .unwrap_or_default(),
            inplace_kwarg,
            out,
            dropped: dropped
                .map(|g| crate::graph::pin(g, self.handles.function_base.bind(py)).unbind()),
        };
        let (log, mut host) = self.split(py);
        log.op(&mut host, call);
    }

    /// A module runs on `tensor` (a view of a leaf) in place of its registered parameter,
    /// `id(parameter)` = `param`: a walk reaching the view has reached that parameter.
    #[pyo3(signature = (tensor, param))]
    fn stand_in(&mut self, py: Python<'_>, tensor: Bound<'_, PyAny>, param: usize) {
        let (log, host) = self.split(py);
        log.stand_in(&host, &tensor, param);
    }

    /// The user's code entered `torch.inference_mode()` (its caller is the user's line).
    fn inference_entered(&mut self, py: Python<'_>) {
        let (log, mut host) = self.split(py);
        log.inference_entered(&mut host);
    }

    /// A reentrant checkpointed forward whose inputs need no grad starts (its caller is the
    /// user's line, or the library's that checkpoints).
    fn checkpoint_entered(&mut self, py: Python<'_>) {
        let (log, mut host) = self.split(py);
        log.checkpoint_entered(&mut host);
    }

    /// That forward returned.
    fn checkpoint_exited(&mut self) {
        self.log.checkpoint_exited();
    }

    /// A custom `autograd.Function` of class `name` is applied (its forward starts): nothing
    /// inside is a cut, and its node is watched for a backward that returns no gradient.
    fn function_entered(&mut self, py: Python<'_>, name: &str) {
        let (log, mut host) = self.split(py);
        log.function_entered(&mut host, name);
    }

    /// That forward returned `out` (None: it raised).
    #[pyo3(signature = (out=None))]
    fn function_exited(&mut self, py: Python<'_>, out: Option<Bound<'_, PyAny>>) {
        let (log, host) = self.split(py);
        log.function_exited(&host, out.as_ref());
    }

    /// The grad mode when capture starts (a step that begins inside `no_grad`).
    fn grad_disabled_at_start(&mut self, py: Python<'_>) {
        let (log, mut host) = self.split(py);
        log.grad_disabled_at_start(&mut host);
    }

    /// A backward starts from `loss`: remember which cuts it depends on.
    fn loss(&mut self, py: Python<'_>, loss: Bound<'_, PyAny>) {
        let (log, mut host) = self.split(py);
        log.loss(&mut host, &loss);
    }

    /// An output a reentrant checkpoint recomputed in backward: the loss depends on it.
    fn recomputed(&mut self, py: Python<'_>, t: Bound<'_, PyAny>) {
        let (log, host) = self.split(py);
        log.recomputed(&host, &t);
    }

    /// The op-level step is over: the watched tensors (`watched`: `(key, tensor)`) and a flat
    /// parameter's parts (`parts`: their keys) that no backward since the `since`-th reached,
    /// that got an exactly-zero gradient, or whose gradient is gone at the step
    /// ([`step_end::classify`]) are attributed to the cuts the loss depends on, into the
    /// capture. `known`: gradient norms the step's optimizers already read (key -> norm),
    /// not read again. Releases every reference.
    #[pyo3(signature = (recorder, since, watched, parts, known))]
    fn end_step(
        &mut self,
        py: Python<'_>,
        mut recorder: PyRefMut<'_, Recorder>,
        since: usize,
        watched: Vec<(u64, Bound<'_, PyAny>)>,
        parts: Vec<u64>,
        known: FxHashMap<u64, Option<f64>>,
    ) -> PyResult<()> {
        let reached: rustc_hash::FxHashSet<u64> =
            recorder.inner.reached_keys(since).into_iter().collect();
        let grad = pyo3::intern!(py, "grad");
        let mut states = Vec::with_capacity(watched.len());
        let mut todo = Vec::new();
        for (key, t) in &watched {
            let g = t.getattr(grad)?;
            let has = !g.is_none();
            if step_end::needs_norm(*key, reached.contains(key), has, &known) {
                todo.push((states.len(), g));
            }
            states.push(step_end::Watched {
                key: *key,
                addr: t.as_ptr() as usize,
                reached: reached.contains(key),
                grad: has.then_some(None),
            });
        }
        let (at, grads): (Vec<usize>, Vec<_>) = todo.into_iter().unzip();
        for (i, n) in at.into_iter().zip(crate::reads::norms(py, grads)?) {
            states[i].grad = Some(Some(n));
        }
        let parts: Vec<(u64, bool)> = parts.iter().map(|k| (*k, reached.contains(k))).collect();
        let end = step_end::classify(&states, &parts, &known);
        if !end.is_empty() {
            let (log, mut host) = self.split(py);
            log.resolve(
                &mut host,
                &mut recorder.inner,
                &end.unreached,
                &end.zero,
                &end.cleared,
            );
        }
        Ok(())
    }

    /// An optimizer's `step()` (`name`: `Adam.step()`) changed `params` in place: each a
    /// `(tensor, key)` of a parameter whose version it changed.
    fn optimizer_step(&mut self, py: Python<'_>, name: &str, params: Vec<(Bound<'_, PyAny>, u64)>) {
        let (log, mut host) = self.split(py);
        log.optimizer_step(&mut host, name, &params);
    }

    /// Matches an in-place error raised by backward to the in-place op that caused it.
    #[pyo3(signature = (recorder, message))]
    fn explain_error(&mut self, mut recorder: PyRefMut<'_, Recorder>, message: &str) -> bool {
        self.log.explain_error(&mut recorder.inner, message)
    }

    /// An op raised (`args`/`kwargs` are its arguments): an in-place op on a leaf that
    /// requires grad, or an op refusing a tensor made under `inference_mode`.
    #[pyo3(signature = (recorder, func, args, kwargs, message))]
    fn failed(
        &mut self,
        py: Python<'_>,
        mut recorder: PyRefMut<'_, Recorder>,
        func: Bound<'_, PyAny>,
        args: Bound<'_, PyTuple>,
        kwargs: Option<Bound<'_, PyDict>>,
        message: &str,
    ) {
        let mut inputs: Vec<Bound<'_, PyAny>> = args.iter().collect();
        if let Some(kw) = kwargs {
            inputs.extend(kw.values().iter());
        }
        let (log, mut host) = self.split(py);
        log.failed(&mut host, &mut recorder.inner, &func, &inputs, message);
    }

    /// Drops every reference and all step state.
    fn clear(&mut self) {
        self.log.clear();
    }

    /// Between a backward and the next forward: only reads and writes of gradients are
    /// recorded.
    #[getter]
    fn grads_only(&self) -> bool {
        self.log.grads_only
    }

    #[setter]
    fn set_grads_only(&mut self, value: bool) {
        self.log.grads_only = value;
    }

    #[getter]
    fn cut_count(&self) -> usize {
        self.log.cut_count()
    }
}

/// The deep step's `__torch_function__`, bound to its mode: calls the op, then hands it to the
/// op log. Native, so no Python frame of gradsleuth's stands between the user's line and the
/// op: a warning the op raises (from Python with a stack level, or from C++) is attributed
/// to the user's line, and `warnings` filters see it there, exactly as without gradsleuth.
#[pyclass(module = "gradsleuth._core")]
pub struct OpCall {
    log: Py<OpLog>,
    recorder: Py<Recorder>,
    inside: std::sync::atomic::AtomicU32,
    passive: std::sync::atomic::AtomicBool,
    getframe: Py<PyAny>,
    warnings: Py<PyAny>,
    /// `torch.overrides.handle_torch_function`'s code: a torch function written in Python
    /// reaches the mode through it, two frames (it and the function's outer call) above the
    /// function's inner call.
    handler: Option<Py<PyAny>>,
    /// `types.FunctionType`: what a torch function written in Python is.
    function_type: Py<PyAny>,
    /// `__warningregistry__`s for warnings re-issued where no module's globals are at hand.
    registries: Py<PyDict>,
    /// The mode this is the `__torch_function__` of (weakly): torch requires the attribute's
    /// `__self__` to be the mode.
    mode: Option<Py<PyAny>>,
    /// A probe run (read once from the recorder): ops' outputs are digested.
    probe: bool,
    /// `torch._C.DisableTorchFunction`: the log's reads of an op's tensors (`requires_grad`,
    /// `grad_fn`, ...) are made under it, so that a function mode of the user's below this one
    /// (an op counter, `torch.device(...)`) sees the user's ops only.
    own_reads: Py<PyAny>,
    /// `torch.Tensor.detach_`: the one op that drops its input's history in place, read
    /// before it runs (one identity comparison per op).
    detach_inplace: Option<Py<PyAny>>,
}

#[pymethods]
impl OpCall {
    #[new]
    fn new(py: Python<'_>, log: Py<OpLog>, recorder: Py<Recorder>) -> PyResult<Self> {
        let handler = py
            .import("torch.overrides")
            .and_then(|m| m.getattr("handle_torch_function"))
            .and_then(|f| f.getattr("__code__"))
            .ok()
            .map(Bound::unbind);
        let probe = recorder.bind(py).try_borrow().is_ok_and(|r| r.inner.probe);
        Ok(OpCall {
            probe,
            own_reads: py
                .import("torch")?
                .getattr("_C")?
                .getattr("DisableTorchFunction")?
                .unbind(),
            log,
            recorder,
            inside: 0.into(),
            passive: false.into(),
            getframe: py.import("sys")?.getattr("_getframe")?.unbind(),
            warnings: py.import("warnings")?.into_any().unbind(),
            handler,
            function_type: py.import("types")?.getattr("FunctionType")?.unbind(),
            registries: PyDict::new(py).unbind(),
            mode: None,
            detach_inplace: py
                .import("torch")?
                .getattr("Tensor")?
                .getattr("detach_")
                .ok()
                .map(Bound::unbind),
        })
    }

    /// Binds this call to its mode (held weakly).
    fn bind(&mut self, mode: Bound<'_, PyAny>) -> PyResult<()> {
        let py = mode.py();
        let weak = py.import("weakref")?.getattr("ref")?.call1((mode,))?;
        self.mode = Some(weak.unbind());
        Ok(())
    }

    /// The mode (what torch checks a mode's `__torch_function__` is bound to).
    #[getter(__self__)]
    fn self_<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.mode {
            Some(w) => w.bind(py).call0(),
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// Ops running now (1 inside `backward()`, which is an op to the mode).
    #[getter]
    fn inside(&self) -> u32 {
        self.inside.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Set when the deep step ends: ops still pass through, none is recorded.
    #[getter]
    fn passive(&self) -> bool {
        self.passive.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[setter]
    fn set_passive(&self, value: bool) {
        self.passive
            .store(value, std::sync::atomic::Ordering::Relaxed);
    }

    /// `mode.__torch_function__(func, types, args, kwargs)`.
    #[pyo3(signature = (func, _types, args=None, kwargs=None))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        func: Bound<'py, PyAny>,
        _types: Bound<'py, PyAny>,
        args: Option<Bound<'py, PyAny>>,
        kwargs: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        use std::sync::atomic::Ordering::Relaxed;
        let args: Bound<'py, PyTuple> = match args {
            None => PyTuple::empty(py),
            Some(a) => match a.cast_into::<PyTuple>() {
                Ok(t) => t,
                Err(e) => PyTuple::new(
                    py,
                    e.into_inner().try_iter()?.collect::<PyResult<Vec<_>>>()?,
                )?,
            },
        };
        let kwargs: Option<Bound<'py, PyDict>> = kwargs
            .filter(|k| !k.is_none())
            .map(|k| k.cast_into::<PyDict>())
            .transpose()?
            .filter(|k| !k.is_empty());
        // A torch function written in Python (`F.dropout2d`) calls the mode from
        // `handle_torch_function`, and calls itself again inside: a warning it raises with a
        // stack level lands two frames off (in torch's own files). Its warnings are caught
        // and re-issued where they would be without the mode.
        // Only a Python function can have come through `handle_torch_function`; a native op
        // (most of them) costs one type comparison here, no frame read.
        let frame = if func.get_type().is(self.function_type.bind(py)) {
            self.getframe.bind(py).call1((0,)).ok().filter(|f| {
                self.handler.as_ref().is_some_and(|code| {
                    f.getattr(pyo3::intern!(py, "f_code"))
                        .is_ok_and(|c| c.is(code.bind(py)))
                })
            })
        } else {
            None
        };
        let dropped = if self
            .detach_inplace
            .as_ref()
            .is_some_and(|d| func.is(d.bind(py)))
            && !self.passive.load(Relaxed)
        {
            self.own_read(py, || {
                args.get_item(0)
                    .and_then(|t| t.getattr(pyo3::intern!(py, "grad_fn")))
                    .ok()
                    .filter(|g| !g.is_none())
            })
        } else {
            None
        };
        self.inside.fetch_add(1, Relaxed);
        let result = match frame {
            Some(frame) => self.call_relocating(py, &frame, &func, &args, kwargs.as_ref()),
            None => func.call(&args, kwargs.as_ref()),
        };
        self.inside.fetch_sub(1, Relaxed);
        if self.passive.load(Relaxed) {
            return result;
        }
        let outcome = &result;
        self.own_read(py, move || match outcome {
            Ok(out) => {
                if let Ok(mut log) = self.log.bind(py).try_borrow_mut() {
                    // The probe digests the step's own ops: not the reads and writes of
                    // gradients watched between a backward and the next forward.
                    if self.probe && !log.log.grads_only {
                        if let Ok(mut rec) = self.recorder.bind(py).try_borrow_mut() {
                            log.digest(py, &mut rec.inner, &func, out);
                        }
                    }
                    log.op(py, func, args, kwargs, out.clone(), dropped);
                }
            }
            Err(e) => {
                if let (Ok(mut log), Ok(rec)) = (
                    self.log.bind(py).try_borrow_mut(),
                    self.recorder.bind(py).try_borrow_mut(),
                ) {
                    let message = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
                    log.failed(py, rec, func, args, kwargs, &message);
                }
            }
        });
        result
    }
}

impl OpCall {
    /// `f()` under `torch._C.DisableTorchFunction`: the log's own reads of the user's tensors
    /// reach no function mode of the user's.
    fn own_read<R>(&self, py: Python<'_>, f: impl FnOnce() -> R) -> R {
        let guard = self.own_reads.bind(py).call0().ok();
        let entered = guard
            .as_ref()
            .is_some_and(|g| g.call_method0(pyo3::intern!(py, "__enter__")).is_ok());
        let r = f();
        if let (Some(g), true) = (guard, entered) {
            let _ = g.call_method1(
                pyo3::intern!(py, "__exit__"),
                (py.None(), py.None(), py.None()),
            );
        }
        r
    }

    /// `func(*args, **kwargs)` with its warnings caught, then re-issued (under the user's own
    /// filters) at the frame they would name without the mode: a location `i` frames above
    /// `frame` (`handle_torch_function`'s) stands for the one `i + 2` frames above.
    fn call_relocating<'py>(
        &self,
        py: Python<'py>,
        frame: &Bound<'py, PyAny>,
        func: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let warnings = self.warnings.bind(py);
        let opts = PyDict::new(py);
        opts.set_item("record", true)?;
        let cm = warnings.getattr("catch_warnings")?.call((), Some(&opts))?;
        let caught = cm.call_method0("__enter__")?;
        warnings.call_method1("simplefilter", ("always",))?;
        let result = func.call(args, kwargs);
        cm.call_method1("__exit__", (py.None(), py.None(), py.None()))?;
        let out = result?;
        if caught.len().unwrap_or(0) == 0 {
            return Ok(out);
        }
        // The frames above, innermost first: (file, line, frame).
        let mut frames: Vec<(String, u32, Bound<'py, PyAny>)> = Vec::new();
        let mut f = frame.clone();
        while !f.is_none() && frames.len() < 12 {
            let file: String = f
                .getattr("f_code")
                .and_then(|c| c.getattr("co_filename"))
                .and_then(|n| n.extract())
                .unwrap_or_default();
            let line: u32 = f.getattr("f_lineno").and_then(|l| l.extract()).unwrap_or(0);
            let back = f.getattr("f_back")?;
            frames.push((file, line, f));
            f = back;
        }
        for w in caught.try_iter()? {
            let w = w?;
            let message = w.getattr("message")?;
            let category = w.getattr("category")?;
            let file: String = w.getattr("filename")?.extract()?;
            let line: u32 = w.getattr("lineno")?.extract()?;
            let at = frames
                .iter()
                .position(|(f, l, _)| *f == file && *l == line)
                .and_then(|i| frames.get(i + 2));
            match at {
                Some((file, line, target)) => {
                    let globals = target.getattr("f_globals")?.cast_into::<PyDict>()?;
                    let module = globals
                        .get_item("__name__")?
                        .map_or_else(|| "<string>".into_pyobject(py).map(|m| m.into_any()), Ok)?;
                    let registry = match globals.get_item("__warningregistry__")? {
                        Some(r) => r,
                        None => {
                            let r = PyDict::new(py).into_any();
                            globals.set_item("__warningregistry__", &r)?;
                            r
                        }
                    };
                    warnings.call_method1(
                        "warn_explicit",
                        (message, category, file, *line, module, registry, globals),
                    )?;
                }
                None => {
                    let registries = self.registries.bind(py);
                    let registry = match registries.get_item(&file)? {
                        Some(r) => r,
                        None => {
                            let r = PyDict::new(py).into_any();
                            registries.set_item(&file, &r)?;
                            r
                        }
                    };
                    let module = file.trim_end_matches(".py").to_owned();
                    warnings.call_method1(
                        "warn_explicit",
                        (message, category, file, line, module, registry),
                    )?;
                }
            }
        }
        Ok(out)
    }
}
