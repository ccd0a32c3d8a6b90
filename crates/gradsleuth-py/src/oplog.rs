//! Op-level capture: every torch call the user's code makes during the deep step arrives here
//! from the tracer's `TorchFunctionMode` (which only forwards). For each op this records:
//!
//! * **cuts**: inputs need grad, outputs do not (or the output is a Python value). Each cut is
//!   classified from the op (`detach`, `.data`, a grad-disabled region, `torch.tensor(t)`,
//!   argmax-like ops, `.item()`/`.tolist()`/`.numpy()` exits) and keeps its inputs' autograd
//!   nodes until the step is resolved;
//! * **taint**: which cuts each tensor (and each Python value that left the graph) depends on,
//!   so a value that comes back through `torch.tensor(values)` is linked to where it left,
//!   and the loss knows which cuts it depends on;
//! * **in-place ops**, with where their target was created and first consumed, so an
//!   "modified by an inplace operation" error can be answered with the exact lines.
//!
//! At the end of the step, [`OpLog::resolve`] walks back from the cuts the loss depends on and
//! attributes every parameter the backward did not reach to the cut on its path, writing
//! [`CutRec`]s into the capture. Identities are object addresses, valid within one step; a
//! new output at a reused address resets what was known about the address.

use std::sync::Arc;

use gradsleuth_graph::{path_to_leaf, walk as walk_graph};
use gradsleuth_model::capture::{CutRec, InplaceRec};
use gradsleuth_model::{Location, Related};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::frames::{FrameWalker, Site};
use crate::graph::Live;
use crate::Recorder;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Plain,
    Detach,
    Data,
    /// `.item()`, `.tolist()`, `.numpy()`: the value leaves autograd as a Python object.
    ValueExit,
    /// `torch.tensor`, `torch.as_tensor`, `torch.from_numpy`, `Tensor.new_tensor`.
    Construct,
    NonDiff,
    GradMode,
    RequiresGrad,
    /// `torch.autograd.grad`: without `create_graph=True` its result has no history.
    AutogradGrad,
    /// Ops whose gradient is zero where they saturate or mask (clamp, where, masked_fill).
    Saturating,
    /// Never a cut: constructors shaped like an input (`zeros_like`, `new_zeros`), metadata
    /// (`.shape`, `.grad`, `.device` getters).
    Ignore,
}

struct FuncInfo {
    name: Arc<str>,
    kind: Kind,
    inplace: bool,
}

/// Proof that an address still holds the object an entry was made for: a weak reference
/// (tensors, arrays), or a strong one for objects that cannot be weakly referenced (floats,
/// lists), which keeps them alive until the step ends.
enum Keeper {
    Weak(Py<PyAny>),
    Strong(#[allow(dead_code)] Py<PyAny>),
}

impl Keeper {
    fn new(obj: &Bound<'_, PyAny>) -> Keeper {
        match pyo3::types::PyWeakrefReference::new(obj) {
            Ok(w) => Keeper::Weak(w.into_any().unbind()),
            Err(_) => Keeper::Strong(obj.clone().unbind()),
        }
    }

    fn holds(&self, obj: &Bound<'_, PyAny>) -> bool {
        match self {
            Keeper::Strong(_) => true,
            Keeper::Weak(w) => w
                .bind(obj.py())
                .call0()
                .is_ok_and(|o| o.as_ptr() == obj.as_ptr()),
        }
    }
}

/// A user frame as a location in the capture (snippet, cwd-relative path).
fn site_location(site: &Site, rec: &mut Recorder) -> Option<Location> {
    rec.loc(
        Some(site.file.to_string()),
        Some(site.line),
        Some(site.function.to_string()),
    )
}

struct Cut {
    kind: &'static str,
    /// The output keeps its history but every gradient through it is zero (round, floor,
    /// sign...): it explains zero gradients, not missing ones.
    soft: bool,
    op: Arc<str>,
    site: Option<Site>,
    related: Vec<(Site, &'static str)>,
    /// Autograd nodes of the inputs that needed grad.
    nodes: Vec<Py<PyAny>>,
    /// Addresses of leaf inputs that needed grad (parameters used directly).
    leaves: Vec<usize>,
}

struct Inplace {
    op: Arc<str>,
    site: Option<Site>,
    version: u64,
    prev_node: Option<String>,
    /// The node the tensor has after the in-place op (errors may name this one).
    node: Option<String>,
    shape: Vec<i64>,
    created: Option<Site>,
    consumed: Option<Site>,
}

const NON_DIFF: &[&str] = &[
    "argmax",
    "argmin",
    "argsort",
    "round",
    "floor",
    "ceil",
    "sign",
    "trunc",
    "frac",
    "eq",
    "ne",
    "lt",
    "gt",
    "le",
    "ge",
    "__eq__",
    "__ne__",
    "__lt__",
    "__gt__",
    "__le__",
    "__ge__",
    "long",
    "int",
    "bool",
    "byte",
    "char",
    "short",
    "searchsorted",
    "bucketize",
    "isnan",
    "isinf",
    "isfinite",
    "nonzero",
    "logical_and",
    "logical_or",
    "logical_not",
    "one_hot",
    "unique",
    "histc",
];

/// The op log of one deep step.
#[pyclass(module = "gradsleuth._core")]
pub struct OpLog {
    /// The module whose forward is running (from the tracer's hooks).
    module: Option<u64>,
    /// (autograd sequence number, module) at each change of the running module: a node made
    /// with number n was made by the module of the last entry at or before n. Read from the
    /// thread's counter, never from `grad_fn`: reading a node from Python gives it a Python
    /// object it keeps, and freeing long chains of those recurses in torch (see
    /// `gradsleuth_graph::MAX_DEPTH`).
    module_timeline: Vec<(u64, Option<u64>)>,
    sequence_nr: Py<PyAny>,
    funcs: FxHashMap<usize, FuncInfo>,
    /// Code object address -> (file, qualname), or None for frames to skip.
    frames: FrameWalker,
    tensor_type: Py<PyAny>,
    is_grad_enabled: Py<PyAny>,
    getframe: Py<PyAny>,
    /// Address -> (cuts it depends on, the object's keeper). Addresses are reused once an
    /// object dies, so an entry counts only while its keeper says it is the same object.
    taint: FxHashMap<usize, (Vec<u32>, Keeper)>,
    values: FxHashMap<usize, (Vec<u32>, Keeper)>,
    cuts: Vec<Cut>,
    grad_off: Vec<Site>,
    created: FxHashMap<usize, Site>,
    consumed: FxHashMap<usize, Site>,
    requires_grad_set: FxHashMap<usize, Site>,
    construct_site: FxHashMap<usize, (Site, Vec<u32>)>,
    inplace: Vec<Inplace>,
    loss_taint: Vec<u32>,
    loss_rewraps: Vec<(Option<Site>, Vec<u32>)>,
    step: u32,
    #[pyo3(get)]
    ops: u64,
    #[pyo3(get)]
    errors: u64,
}

fn has<T: PartialEq>(v: &[T], x: &T) -> bool {
    v.iter().any(|y| y == x)
}

fn union(into: &mut Vec<u32>, from: &[u32]) {
    for x in from {
        if !has(into, x) {
            into.push(*x);
        }
    }
}

impl OpLog {
    fn func_info(&mut self, func: &Bound<'_, PyAny>) -> &FuncInfo {
        self.funcs
            .entry(func.as_ptr() as usize)
            .or_insert_with(|| classify(func))
    }

    /// The innermost frame of the user's code.
    fn site(&mut self, py: Python<'_>) -> Option<Site> {
        self.stack(py, 1).into_iter().next()
    }

    /// Up to `depth` frames of the user's code, innermost first.
    fn stack(&mut self, py: Python<'_>, depth: usize) -> Vec<Site> {
        match self.getframe.bind(py).call1((1,)) {
            Ok(frame) => self
                .frames
                .walk(frame, depth)
                .into_iter()
                .map(|(s, _)| s)
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    fn is_tensor(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> bool {
        obj.is_instance(self.tensor_type.bind(py)).unwrap_or(false)
    }

    /// Tensors among `obj` (a tensor, or a list/tuple of them, one level deep).
    fn tensors<'py>(
        &self,
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        out: &mut Vec<Bound<'py, PyAny>>,
    ) {
        if self.is_tensor(py, obj) {
            out.push(obj.clone());
        } else if let Ok(t) = obj.cast::<PyTuple>() {
            for x in t.iter() {
                if self.is_tensor(py, &x) {
                    out.push(x);
                }
            }
        } else if let Ok(l) = obj.cast::<PyList>() {
            for x in l.iter().take(64) {
                if self.is_tensor(py, &x) {
                    out.push(x);
                }
            }
        }
    }

    /// Taint carried by Python values (floats from `.item()`, lists from `.tolist()`, arrays).
    fn value_taint(&self, obj: &Bound<'_, PyAny>, into: &mut Vec<u32>, depth: u32) {
        if let Some((t, keeper)) = self.values.get(&(obj.as_ptr() as usize)) {
            if keeper.holds(obj) {
                union(into, t);
            }
        }
        if depth > 2 {
            return;
        }
        if let Ok(l) = obj.cast::<PyList>() {
            for x in l.iter().take(4096) {
                self.value_taint(&x, into, depth + 1);
            }
        } else if let Ok(t) = obj.cast::<PyTuple>() {
            for x in t.iter().take(4096) {
                self.value_taint(&x, into, depth + 1);
            }
        }
    }

    fn mark_values(&mut self, obj: &Bound<'_, PyAny>, taint: &[u32], depth: u32) {
        let ptr = obj.as_ptr() as usize;
        let fresh = self.values.get(&ptr).is_none_or(|(_, k)| !k.holds(obj));
        if fresh {
            self.values.insert(ptr, (Vec::new(), Keeper::new(obj)));
        }
        if let Some((t, _)) = self.values.get_mut(&ptr) {
            union(t, taint);
        }
        if depth > 2 {
            return;
        }
        if let Ok(l) = obj.cast::<PyList>() {
            for x in l.iter().take(4096) {
                self.mark_values(&x, taint, depth + 1);
            }
        }
    }

    /// Records a cut whose inputs are `needs_grad` (their autograd nodes, or the leaves
    /// themselves); returns its id.
    #[allow(clippy::too_many_arguments)]
    fn push_cut(
        &mut self,
        py: Python<'_>,
        needs_grad: &[Bound<'_, PyAny>],
        kind: &'static str,
        op: &Arc<str>,
        site: Option<Site>,
        related: Vec<(Site, &'static str)>,
        soft: bool,
    ) -> PyResult<u32> {
        let mut nodes = Vec::new();
        let mut leaves = Vec::new();
        for t in needs_grad {
            let gf = t.getattr(pyo3::intern!(py, "grad_fn"))?;
            if gf.is_none() {
                leaves.push(t.as_ptr() as usize);
            } else {
                nodes.push(gf.unbind());
            }
        }
        let id = self.cuts.len() as u32;
        self.cuts.push(Cut {
            kind,
            op: op.clone(),
            site,
            related,
            nodes,
            leaves,
            soft,
        });
        Ok(id)
    }

    fn record(
        &mut self,
        py: Python<'_>,
        func: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.ops += 1;
        let (name, kind, mut inplace) = {
            let f = self.func_info(func);
            (f.name.clone(), f.kind, f.inplace)
        };
        if let Some(kw) = kwargs {
            if let Ok(Some(v)) = kw.get_item("inplace") {
                inplace |= v.is_truthy().unwrap_or(false);
            }
        }
        if kind == Kind::GradMode {
            let enabled = args.get_item(0).and_then(|a| a.is_truthy()).unwrap_or(true);
            if enabled {
                self.grad_off.pop();
            } else if let Some(site) = self.site(py) {
                self.grad_off.push(site);
            }
            return Ok(());
        }
        let mut inputs: Vec<Bound<'_, PyAny>> = Vec::new();
        for a in args.iter() {
            self.tensors(py, &a, &mut inputs);
        }
        if let Some(kw) = kwargs {
            for (_, v) in kw.iter() {
                self.tensors(py, &v, &mut inputs);
            }
        }
        let mut taint: Vec<u32> = Vec::new();
        let mut needs_grad: Vec<Bound<'_, PyAny>> = Vec::new();
        for t in &inputs {
            if let Some((ts, keeper)) = self.taint.get(&(t.as_ptr() as usize)) {
                if keeper.holds(t) {
                    union(&mut taint, ts);
                }
            }
            if t.getattr(pyo3::intern!(py, "requires_grad"))?.is_truthy()? {
                needs_grad.push(t.clone());
            }
        }
        if kind == Kind::Construct {
            if let Ok(data) = args.get_item(0) {
                self.value_taint(&data, &mut taint, 0);
            }
        }
        let mut outputs: Vec<Bound<'_, PyAny>> = Vec::new();
        self.tensors(py, out, &mut outputs);
        let mut out_needs_grad = false;
        for o in &outputs {
            if o.getattr(pyo3::intern!(py, "requires_grad"))?.is_truthy()? {
                out_needs_grad = true;
            }
        }
        let mut site: Option<Option<Site>> = None;
        let value_exit = kind == Kind::ValueExit;
        if kind != Kind::Ignore
            && !needs_grad.is_empty()
            && (value_exit || (!outputs.is_empty() && !out_needs_grad))
        {
            let grad_enabled = self.is_grad_enabled.bind(py).call0()?.is_truthy()?;
            let mut related = Vec::new();
            let cut_kind = match kind {
                Kind::Detach => "detach",
                Kind::Data => "data_attr",
                Kind::ValueExit => "numpy_roundtrip",
                Kind::Construct => "rewrap",
                Kind::AutogradGrad => "create_graph",
                _ if !grad_enabled => {
                    if let Some(s) = self.grad_off.last() {
                        related.push((s.clone(), "gradient recording disabled here"));
                    }
                    // The callers too: the `with` block or decorator may be a few calls up.
                    for s in self.stack(py, 4).into_iter().skip(1) {
                        related.push((s, "called from here"));
                    }
                    "no_grad"
                }
                // argmax-like ops, integer/bool casts, comparisons, and any other op whose
                // output does not need grad while its input does.
                _ => "non_differentiable",
            };
            let s = self.site(py);
            site = Some(s.clone());
            taint.push(self.push_cut(py, &needs_grad, cut_kind, &name, s, related, false)?);
        } else if matches!(kind, Kind::NonDiff | Kind::Saturating)
            && out_needs_grad
            && !needs_grad.is_empty()
            && taint.len() < 32
        {
            // round/floor/sign keep a grad_fn whose gradient is zero everywhere; clamp/where
            // where they saturate or mask everything. Candidates for zero gradients only.
            let soft_kind = if kind == Kind::NonDiff {
                "non_differentiable"
            } else {
                "dead_path"
            };
            let s = self.site(py);
            site = Some(s.clone());
            taint.push(self.push_cut(py, &needs_grad, soft_kind, &name, s, Vec::new(), true)?);
        }
        if value_exit && !taint.is_empty() {
            // Values leaving autograd carry what they depend on into Python.
            self.mark_values(out, &taint, 0);
        }
        if kind == Kind::Ignore {
            taint.clear();
        }
        let site_now = |me: &mut Self, site: &mut Option<Option<Site>>| -> Option<Site> {
            if site.is_none() {
                *site = Some(me.site(py));
            }
            site.clone().flatten()
        };
        if kind == Kind::Construct && !taint.is_empty() {
            // A value that left the graph came back: where it came back is part of the chain.
            if let Some(s) = site_now(self, &mut site) {
                for &c in &taint {
                    if let Some(cut) = self.cuts.get_mut(c as usize) {
                        if cut.kind == "numpy_roundtrip" && cut.related.is_empty() {
                            cut.related
                                .push((s.clone(), "the value comes back into torch here"));
                        }
                    }
                }
            }
        }
        let input_ptrs: FxHashSet<usize> = inputs.iter().map(|t| t.as_ptr() as usize).collect();
        for o in &outputs {
            let ptr = o.as_ptr() as usize;
            if taint.is_empty() {
                self.taint.remove(&ptr);
            } else {
                self.taint.insert(ptr, (taint.clone(), Keeper::new(o)));
            }
            if !input_ptrs.contains(&ptr) {
                // A new tensor at this address: forget what the address meant before.
                self.consumed.remove(&ptr);
                self.requires_grad_set.remove(&ptr);
                self.construct_site.remove(&ptr);
                if out_needs_grad || kind == Kind::Construct {
                    if let Some(s) = site_now(self, &mut site) {
                        if out_needs_grad {
                            self.created.insert(ptr, s.clone());
                        }
                        if kind == Kind::Construct {
                            self.construct_site.insert(ptr, (s, taint.clone()));
                        }
                    }
                }
            }
        }
        if kind == Kind::RequiresGrad {
            if let (Ok(t), Some(s)) = (args.get_item(0), site_now(self, &mut site)) {
                self.requires_grad_set.insert(t.as_ptr() as usize, s);
            }
        }
        if !needs_grad.is_empty() {
            let mut s = None;
            for t in &needs_grad {
                let ptr = t.as_ptr() as usize;
                if !self.consumed.contains_key(&ptr) {
                    if s.is_none() {
                        s = site_now(self, &mut site);
                    }
                    if let Some(s) = &s {
                        self.consumed.insert(ptr, s.clone());
                    }
                }
            }
        }
        if inplace {
            if let Ok(target) = args.get_item(0) {
                if self.is_tensor(py, &target) {
                    let ptr = target.as_ptr() as usize;
                    let version: u64 = target
                        .getattr("_version")
                        .and_then(|v| v.extract())
                        .unwrap_or(0);
                    let grad_fn = target.getattr("grad_fn").ok().filter(|g| !g.is_none());
                    let node = grad_fn
                        .as_ref()
                        .and_then(|g| g.get_type().name().ok().map(|s| s.to_string()));
                    let prev_node = grad_fn
                        .and_then(|g| g.getattr("next_functions").ok())
                        .and_then(|n| n.get_item(0).ok())
                        .and_then(|e| e.get_item(0).ok())
                        .filter(|n| !n.is_none())
                        .and_then(|n| n.get_type().name().ok().map(|s| s.to_string()));
                    let shape: Vec<i64> = target
                        .getattr("shape")
                        .and_then(|s| s.extract())
                        .unwrap_or_default();
                    let s = site_now(self, &mut site);
                    self.inplace.push(Inplace {
                        op: name.clone(),
                        site: s,
                        version,
                        prev_node,
                        node,
                        shape,
                        created: self.created.get(&ptr).cloned(),
                        consumed: self.consumed.get(&ptr).cloned(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Name and kind of a torch function, computed once per function object.
fn classify(func: &Bound<'_, PyAny>) -> FuncInfo {
    let qual: String = func
        .getattr("__qualname__")
        .or_else(|_| func.getattr("__name__"))
        .and_then(|n| n.extract())
        .unwrap_or_else(|_| "<op>".to_owned());
    // `Tensor.data` arrives as the descriptor's `__get__`: name it by its owner.
    let owner: Option<String> = func
        .getattr("__self__")
        .ok()
        .and_then(|s| s.getattr("__name__").ok())
        .and_then(|n| n.extract().ok());
    let mut short = qual.rsplit('.').next().unwrap_or(&qual).to_owned();
    let is_descriptor = qual.starts_with("getset_descriptor.");
    if is_descriptor {
        short = format!("{}.{}", owner.clone().unwrap_or_default(), short);
    }
    let name = if is_descriptor {
        format!("Tensor.{}", owner.clone().unwrap_or_default())
    } else if qual.starts_with("TensorBase.") || qual.starts_with("Tensor.") {
        format!("Tensor.{}", qual.rsplit('.').next().unwrap_or(&qual))
    } else if qual.starts_with("_VariableFunctionsClass.") {
        format!("torch.{}", qual.rsplit('.').next().unwrap_or(&qual))
    } else {
        qual.clone()
    };
    let base = short.trim_start_matches("__").trim_end_matches("__");
    let kind = match short.as_str() {
        "detach" | "detach_" => Kind::Detach,
        "data.__get__" => Kind::Data,
        _ if is_descriptor && !short.ends_with(".__set__") => Kind::Ignore,
        s if s.ends_with("_like") || (s.starts_with("new_") && s != "new_tensor") => Kind::Ignore,
        "size" | "dim" | "numel" | "stride" | "element_size" | "is_floating_point"
        | "is_complex" | "__len__" | "__format__" | "__repr__" | "__hash__" | "__bool__"
        | "data_ptr" | "get_device" => Kind::Ignore,
        "item" | "tolist" | "numpy" => Kind::ValueExit,
        "grad" if qual == "grad" => Kind::AutogradGrad,
        "clamp" | "clamp_" | "clip" | "clip_" | "clamp_min" | "clamp_max" | "hardtanh"
        | "hardtanh_" | "relu6" | "threshold" | "where" | "masked_fill" | "masked_fill_" => {
            Kind::Saturating
        }
        "tensor" | "as_tensor" | "from_numpy" | "new_tensor" | "asarray" => Kind::Construct,
        "_set_grad_enabled" | "set_grad_enabled" => Kind::GradMode,
        "requires_grad_" | "requires_grad.__set__" => Kind::RequiresGrad,
        _ if NON_DIFF.contains(&base) => Kind::NonDiff,
        _ => Kind::Plain,
    };
    let inplace = (short.ends_with('_')
        && !short.ends_with("__")
        && !matches!(kind, Kind::Detach | Kind::RequiresGrad))
        || short.starts_with("__i") && short.ends_with("__")
        || short == "__setitem__";
    FuncInfo {
        name: name.into(),
        kind,
        inplace,
    }
}

/// Parses PyTorch's in-place error: `[torch.FloatTensor [4, 8]], which is output 0 of
/// ReluBackward0, is at version 2; expected version 1 instead`.
pub fn parse_inplace_error(msg: &str) -> Option<(Vec<i64>, String, u64, u64)> {
    let shape = msg
        .split("Tensor [")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .map(|s| {
            s.split(',')
                .filter_map(|x| x.trim().parse::<i64>().ok())
                .collect::<Vec<_>>()
        });
    let node = msg.split("output 0 of ").nth(1).or_else(|| {
        msg.split("output ")
            .nth(1)
            .and_then(|r| r.split(" of ").nth(1))
    })?;
    let node: String = node
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let at: u64 = msg
        .split("is at version ")
        .nth(1)?
        .split(';')
        .next()?
        .trim()
        .parse()
        .ok()?;
    let expected: u64 = msg
        .split("expected version ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((shape.unwrap_or_default(), node, at, expected))
}

impl OpLog {
    /// The module that was running when the node with sequence number `seq` was made.
    fn module_at(&self, seq: u64) -> Option<u64> {
        let i = self.module_timeline.partition_point(|(s, _)| *s <= seq);
        i.checked_sub(1).and_then(|i| self.module_timeline[i].1)
    }
}

#[pymethods]
impl OpLog {
    #[new]
    fn new(py: Python<'_>, skip_prefixes: Vec<String>, step: u32) -> PyResult<Self> {
        let torch = py.import("torch")?;
        Ok(OpLog {
            funcs: Default::default(),
            frames: FrameWalker::new(skip_prefixes),
            tensor_type: torch.getattr("Tensor")?.unbind(),
            is_grad_enabled: torch.getattr("is_grad_enabled")?.unbind(),
            getframe: py.import("sys")?.getattr("_getframe")?.unbind(),
            taint: Default::default(),
            values: Default::default(),
            cuts: Vec::new(),
            grad_off: Vec::new(),
            created: Default::default(),
            consumed: Default::default(),
            requires_grad_set: Default::default(),
            construct_site: Default::default(),
            inplace: Vec::new(),
            loss_taint: Vec::new(),
            loss_rewraps: Vec::new(),
            step,
            ops: 0,
            errors: 0,
            module: None,
            module_timeline: Vec::new(),
            sequence_nr: py
                .import("torch._C._autograd")?
                .getattr("_get_sequence_nr")?
                .unbind(),
        })
    }

    /// The module whose forward is running now (set by the tracer's module hooks).
    fn set_module(&mut self, py: Python<'_>, key: Option<u64>) {
        self.module = key;
        if let Ok(seq) = self
            .sequence_nr
            .bind(py)
            .call0()
            .and_then(|s| s.extract::<u64>())
        {
            let len = self.module_timeline.len();
            match self.module_timeline.last_mut() {
                Some(last) if last.0 == seq => last.1 = key,
                _ if len < 1_000_000 => self.module_timeline.push((seq, key)),
                _ => {}
            }
        }
    }

    /// Snapshot of the autograd graph behind `loss` into the capture (at most `budget` nodes):
    /// node types, the module that made each node (inherited from its consumer inside
    /// composite ops), the parameter key of each leaf (`keys`: id(tensor) -> key).
    #[pyo3(signature = (recorder, loss, keys, budget=250_000))]
    fn graph(
        &mut self,
        py: Python<'_>,
        mut recorder: PyRefMut<'_, Recorder>,
        loss: Bound<'_, PyAny>,
        keys: FxHashMap<usize, u64>,
        budget: usize,
    ) -> PyResult<()> {
        let Ok(root) = loss.getattr("grad_fn") else {
            return Ok(());
        };
        if root.is_none() || recorder.capture.graph.is_some() {
            return Ok(());
        }
        let mut source = Live::new(py);
        let mut index: FxHashMap<usize, u32> = FxHashMap::default();
        let mut rec = gradsleuth_model::capture::GraphRec::default();
        // Depth-first, each node with its depth: no deeper than `MAX_DEPTH` (see there: freeing
        // nodes Python has read recurses in torch).
        let mut stack: Vec<(Bound<'_, PyAny>, Option<u64>, usize)> = vec![(root, None, 0)];
        let mut children = Vec::new();
        while let Some((node, inherited, depth)) = stack.pop() {
            let id = node.as_ptr() as usize;
            if index.contains_key(&id) {
                continue;
            }
            if rec.nodes.len() >= budget {
                rec.truncated = true;
                break;
            }
            let module = node
                .call_method0(pyo3::intern!(py, "_sequence_nr"))
                .and_then(|s| s.extract::<u64>())
                .ok()
                .and_then(|seq| self.module_at(seq))
                .or(inherited);
            let param = gradsleuth_graph::GraphSource::leaf(&mut source, &node)?
                .and_then(|addr| keys.get(&(addr as usize)).copied());
            let name = node.get_type().name()?.to_string();
            let i = rec.nodes.len() as u32;
            index.insert(id, i);
            rec.nodes.push(gradsleuth_model::capture::GraphNode {
                name,
                module,
                param,
            });
            if depth == gradsleuth_graph::MAX_DEPTH {
                rec.truncated = true;
                continue;
            }
            children.clear();
            gradsleuth_graph::GraphSource::children(&mut source, &node, &mut children)?;
            for c in children.drain(..) {
                stack.push((c, module, depth + 1));
            }
        }
        // Edges, now that every node has an index (a second, cheap pass over the same nodes).
        let mut edges = Vec::new();
        let root = loss.getattr("grad_fn")?;
        let mut stack = vec![root];
        let mut seen: FxHashSet<usize> = FxHashSet::default();
        while let Some(node) = stack.pop() {
            let id = node.as_ptr() as usize;
            let Some(&from) = index.get(&id) else {
                continue;
            };
            if !seen.insert(id) {
                continue;
            }
            children.clear();
            gradsleuth_graph::GraphSource::children(&mut source, &node, &mut children)?;
            for c in children.drain(..) {
                if let Some(&to) = index.get(&(c.as_ptr() as usize)) {
                    edges.push((from, to));
                    stack.push(c);
                }
            }
        }
        rec.edges = edges;
        recorder.capture.graph = Some(rec);
        Ok(())
    }

    /// One op: `func(*args, **kwargs)` returned `out`. Never raises.
    #[pyo3(signature = (func, args, kwargs, out))]
    fn op(
        &mut self,
        py: Python<'_>,
        func: Bound<'_, PyAny>,
        args: Bound<'_, PyTuple>,
        kwargs: Option<Bound<'_, PyDict>>,
        out: Bound<'_, PyAny>,
    ) {
        if self
            .record(py, &func, &args, kwargs.as_ref(), &out)
            .is_err()
        {
            self.errors += 1;
        }
    }

    /// The grad mode when capture starts (a step that begins inside `no_grad`).
    fn grad_disabled_at_start(&mut self, py: Python<'_>) {
        if let Some(s) = self.site(py) {
            self.grad_off.push(s);
        }
    }

    /// A backward starts from `loss`: remember which cuts it depends on.
    fn loss(&mut self, py: Python<'_>, loss: Bound<'_, PyAny>) {
        let ptr = loss.as_ptr() as usize;
        let mut taint = match self.taint.get(&ptr) {
            Some((t, keeper)) if keeper.holds(&loss) => t.clone(),
            _ => Vec::new(),
        };
        let is_leaf = loss
            .getattr("grad_fn")
            .map(|g| g.is_none())
            .unwrap_or(false);
        let requires = loss
            .getattr("requires_grad")
            .and_then(|r| r.is_truthy())
            .unwrap_or(false);
        if is_leaf && requires {
            // A leaf loss: made with requires_grad=True (or requires_grad_()) from values
            // that had left the graph. Nothing upstream of it can learn.
            let site = self
                .requires_grad_set
                .get(&ptr)
                .cloned()
                .or_else(|| self.construct_site.get(&ptr).map(|(s, _)| s.clone()))
                .or_else(|| self.created.get(&ptr).cloned());
            if let Some((_, t)) = self.construct_site.get(&ptr) {
                union(&mut taint, t);
            }
            self.loss_rewraps.push((site, taint.clone()));
        }
        let _ = py;
        union(&mut self.loss_taint, &taint);
    }

    /// Attributes parameters the backward did not reach (`unreached`: address -> key) and
    /// those whose gradient was exactly zero (`zero`) to the cuts the loss depends on, and
    /// writes them into the capture. A parameter behind several cuts is named by each (all
    /// must change). Releases every reference.
    fn resolve<'py>(
        &mut self,
        py: Python<'py>,
        mut recorder: PyRefMut<'_, Recorder>,
        unreached: FxHashMap<usize, u64>,
        zero: FxHashMap<usize, u64>,
    ) {
        let mut order: Vec<u32> = self.loss_taint.clone();
        order.sort_unstable();
        // `.item()` exits that only feed a re-made leaf loss are told by the loss_rewrap finding.
        let rewrap_exits: FxHashSet<u32> = self
            .loss_rewraps
            .iter()
            .flat_map(|(_, t)| t.iter().copied())
            .filter(|id| {
                self.cuts
                    .get(*id as usize)
                    .is_some_and(|c| c.kind == "numpy_roundtrip")
            })
            .collect();
        let mut out: Vec<CutRec> = Vec::new();
        let mut src = Live::new(py);
        for id in order {
            let Some(cut) = self.cuts.get(id as usize) else {
                continue;
            };
            if rewrap_exits.contains(&id) {
                continue;
            }
            let pool = if cut.soft { &zero } else { &unreached };
            let (params, first_leaf) = reach(py, cut, pool, &mut src);
            // A gradient term without create_graph adds nothing to the gradient even when
            // every parameter still learns through the rest of the loss.
            if params.is_empty() && cut.kind != "create_graph" {
                continue;
            }
            // Names are final only at the end of the run: the analysis puts the parameter first.
            let mut chain = Vec::new();
            if let (Some(leaf), Some(root)) = (first_leaf, cut.nodes.first()) {
                if let Ok(Some(path)) =
                    path_to_leaf(&mut src, root.bind(py).clone(), leaf, 100_000, |_, n| {
                        n.get_type()
                            .name()
                            .map(|s| s.to_string())
                            .unwrap_or_default()
                    })
                {
                    chain.extend(path.into_iter().rev().skip(1).take(12));
                }
            }
            let here = cut
                .site
                .as_ref()
                .map(|s| format!(" at {}:{}", short(&s.file), s.line))
                .unwrap_or_default();
            chain.push(format!("✂ {}{here}", cut.op));
            chain.push("loss".into());
            let location = cut
                .site
                .as_ref()
                .and_then(|s| site_location(s, &mut recorder));
            let related: Vec<Related> = cut
                .related
                .iter()
                .filter_map(|(s, m)| {
                    Some(Related {
                        location: site_location(s, &mut recorder)?,
                        message: (*m).to_owned(),
                    })
                })
                .collect();
            out.push(CutRec {
                kind: cut.kind.to_owned(),
                op: cut.op.to_string(),
                location,
                related,
                params,
                chain,
                step: self.step,
            });
        }
        // A leaf loss: nothing upstream of it can learn, whatever path the values took.
        for (site, taint) in &self.loss_rewraps {
            let mut params: Vec<u64> = unreached.values().copied().collect();
            params.sort_unstable();
            let mut related = Vec::new();
            // Where the value left autograd: the exits it carries, else any cut reaching them.
            let exits: Vec<&Cut> = taint
                .iter()
                .filter_map(|id| self.cuts.get(*id as usize))
                .filter(|c| !c.soft)
                .collect();
            let exits = if exits.is_empty() {
                self.cuts
                    .iter()
                    .filter(|c| !c.soft)
                    .filter(|c| !reach(py, c, &unreached, &mut src).0.is_empty())
                    .take(1)
                    .collect()
            } else {
                exits
            };
            for c in exits {
                if let Some(l) = c
                    .site
                    .as_ref()
                    .and_then(|s| site_location(s, &mut recorder))
                {
                    related.push(Related {
                        location: l,
                        message: format!("`{}` takes the value out of autograd", c.op),
                    });
                }
            }
            out.push(CutRec {
                kind: "loss_rewrap".into(),
                op: "requires_grad=True".into(),
                location: site.as_ref().and_then(|s| site_location(s, &mut recorder)),
                related,
                params,
                chain: vec![
                    "the loss's value is copied into a new leaf tensor".into(),
                    "✂ backward starts at the copy".into(),
                ],
                step: self.step,
            });
        }
        recorder.capture.cuts.extend(out);
        self.clear();
    }

    /// Matches an in-place error raised by backward to the in-place op that caused it.
    fn explain_error(&mut self, mut recorder: PyRefMut<'_, Recorder>, message: &str) -> bool {
        if message.contains("a leaf Variable that requires grad") {
            return false;
        }
        let Some((shape, node, at, expected)) = parse_inplace_error(message) else {
            return false;
        };
        // The message names the tensor's node before or after the in-place op, sometimes
        // shortened ("Add" for AddBackward0).
        let names = |e: &&Inplace| {
            [e.prev_node.as_deref(), e.node.as_deref()]
                .into_iter()
                .flatten()
                .any(|n| n == node || n.starts_with(&node))
        };
        let hit = self
            .inplace
            .iter()
            .filter(names)
            .filter(|e| shape.is_empty() || e.shape == shape)
            .find(|e| e.version > expected && e.version <= at)
            .or_else(|| {
                self.inplace
                    .iter()
                    .filter(names)
                    .find(|e| e.version > expected && e.version <= at)
            })
            .or_else(|| {
                self.inplace
                    .iter()
                    .filter(|e| e.shape == shape)
                    .find(|e| e.version > expected && e.version <= at)
            });
        let Some(e) = hit else { return false };
        let node = e.prev_node.clone().unwrap_or(node);
        let rec = InplaceRec {
            op: e.op.to_string(),
            location: e
                .site
                .as_ref()
                .and_then(|s| site_location(s, &mut recorder)),
            saved_at: e
                .consumed
                .as_ref()
                .and_then(|s| site_location(s, &mut recorder)),
            created_at: e
                .created
                .as_ref()
                .and_then(|s| site_location(s, &mut recorder)),
            node,
            shape: e.shape.clone(),
            version: e.version,
            kind: "inplace_saved".into(),
        };
        recorder.capture.inplace.push(rec);
        true
    }

    /// An op raised: an in-place op on a leaf that requires grad is `inplace_leaf`.
    fn failed(
        &mut self,
        py: Python<'_>,
        mut recorder: PyRefMut<'_, Recorder>,
        func: Bound<'_, PyAny>,
        message: &str,
    ) {
        if !message.contains("a leaf Variable that requires grad") {
            return;
        }
        let name = self.func_info(&func).name.to_string();
        let location = self.site(py).and_then(|s| site_location(&s, &mut recorder));
        recorder.capture.inplace.push(InplaceRec {
            op: name,
            location,
            kind: "inplace_leaf".into(),
            ..Default::default()
        });
    }

    /// Drops every reference and all step state.
    fn clear(&mut self) {
        self.cuts.clear();
        self.taint.clear();
        self.values.clear();
        self.created.clear();
        self.consumed.clear();
        self.requires_grad_set.clear();
        self.construct_site.clear();
        self.inplace.clear();
        self.loss_taint.clear();
        self.loss_rewraps.clear();
        self.grad_off.clear();
        self.module_timeline.clear();
    }

    #[getter]
    fn cut_count(&self) -> usize {
        self.cuts.len()
    }
}

/// Parameters in `pool` (address -> key) that the cut's inputs depend on, and the address of
/// the first one found.
fn reach<'py>(
    py: Python<'py>,
    cut: &Cut,
    pool: &FxHashMap<usize, u64>,
    src: &mut Live<'py>,
) -> (Vec<u64>, Option<u64>) {
    let roots: Vec<Bound<'py, PyAny>> = cut.nodes.iter().map(|n| n.bind(py).clone()).collect();
    let mut leaves: Vec<u64> = cut.leaves.iter().map(|p| *p as u64).collect();
    if let Ok(w) = walk_graph(src, roots, 5_000_000) {
        leaves.extend(w.leaves);
    }
    let mut params = Vec::new();
    let mut first = None;
    for l in leaves {
        if let Some(k) = pool.get(&(l as usize)) {
            if !params.contains(k) {
                params.push(*k);
                first.get_or_insert(l);
            }
        }
    }
    (params, first)
}

fn short(file: &str) -> &str {
    std::path::Path::new(file)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_inplace_error() {
        let msg = "one of the variables needed for gradient computation has been modified by an inplace operation: [torch.FloatTensor [4, 8]], which is output 0 of ReluBackward0, is at version 2; expected version 1 instead. Hint: ...";
        assert_eq!(
            parse_inplace_error(msg),
            Some((vec![4, 8], "ReluBackward0".into(), 2, 1))
        );
        assert_eq!(parse_inplace_error("something else"), None);
    }

    #[test]
    fn non_diff_list_has_the_documented_ops() {
        for op in [
            "argmax", "round", "floor", "ceil", "sign", "long", "eq", "gt",
        ] {
            assert!(NON_DIFF.contains(&op), "{op}");
        }
    }
}
