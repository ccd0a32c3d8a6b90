//! What the user's code binds, read from its frames and objects: the names its namespaces give
//! tensors and models, the model a layer called on its own belongs to, where a module's class
//! and `forward` are defined, whether a parameter is frozen by its own module's constructor,
//! which known checkpoint loader is writing, whether a module runs on tensors swapped in for
//! its parameters. The tracer hands over frames and objects and asks; the decisions are here.
//!
//! Nothing here raises into the user's script where the tracer would not catch it, and nothing
//! keeps what it reads: ids cross back as integers, objects only as the answer asked for.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyModule, PyTuple, PyType};

use crate::Loc3;

/// How many entries of one container (a list of tensors, a model's parameters) are read:
/// naming must cost no more than a glance at a huge one.
const LIMIT: usize = 10_000;
/// `inspect.CO_OPTIMIZED`: a function's code (fast locals).
const CO_OPTIMIZED: u32 = 0x1;

static TENSOR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static MODULE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static PARAMETER: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static FUNCTION: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static METHOD: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static ABSPATH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static CLASS_DEFS: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
static TORCH_DIR: PyOnceLock<String> = PyOnceLock::new();

/// `torch.Tensor`, looked up once.
pub(crate) fn tensor_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    TENSOR.import(py, "torch", "Tensor")
}

pub(crate) fn is_tensor(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    v.is_instance(tensor_type(v.py())?)
}

/// A Python function (`types.FunctionType`).
pub(crate) fn is_function(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    v.is_instance(FUNCTION.import(v.py(), "types", "FunctionType")?)
}

/// A bound method (`types.MethodType`).
pub(crate) fn is_method(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    v.is_instance(METHOD.import(v.py(), "types", "MethodType")?)
}

fn is_module(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    v.is_instance(MODULE.import(v.py(), "torch.nn", "Module")?)
}

/// Python's `id()`.
fn id(v: &Bound<'_, PyAny>) -> usize {
    v.as_ptr() as usize
}

pub(crate) fn abspath(py: Python<'_>, file: &str) -> PyResult<String> {
    ABSPATH
        .import(py, "os.path", "abspath")?
        .call1((file,))?
        .extract()
}

/// torch's package folder with a trailing separator: classes and code defined there are not
/// the user's.
fn torch_dir(py: Python<'_>) -> PyResult<&String> {
    TORCH_DIR.get_or_try_init(py, || {
        let file: String = py.import("torch")?.getattr("__file__")?.extract()?;
        let dir = std::path::Path::new(&file)
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        Ok(format!("{dir}{}", std::path::MAIN_SEPARATOR))
    })
}

/// A snapshot of a mapping's `(key, value)` pairs (a dict, or 3.13's frame-locals proxy): the
/// script may change the mapping while it is read.
pub(crate) fn items<'py>(
    mapping: &Bound<'py, PyAny>,
) -> PyResult<Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    mapping
        .call_method0(pyo3::intern!(mapping.py(), "items"))?
        .try_iter()?
        .map(|item| item?.extract())
        .collect()
}

/// The names of tensors one namespace binds (see [`bound_names`]); the first name found for a
/// tensor stays.
fn name_scope(scope: &Bound<'_, PyAny>, out: &mut HashMap<usize, String>) -> PyResult<()> {
    let py = scope.py();
    for (name, value) in items(scope)? {
        let name: String = name.extract()?;
        if name.starts_with('_') {
            continue;
        }
        if is_tensor(&value)? {
            out.entry(id(&value)).or_insert(name);
            continue;
        }
        if is_module(&value)? {
            if name != "self" {
                // A model's parameters by the variable that holds it (`model.0.weight`): named
                // so when that model never runs (a copy of it does).
                let params = value.call_method0(pyo3::intern!(py, "named_parameters"))?;
                for pair in params.try_iter()?.take(LIMIT) {
                    let (pname, p): (String, Bound<'_, PyAny>) = pair?.extract()?;
                    out.entry(id(&p))
                        .or_insert_with(|| format!("{name}.{pname}"));
                }
            }
            continue;
        }
        // Entries of a list, tuple or dict, or an object's attributes (`self.w`); classes,
        // modules and functions hold no tensor of the script's.
        let entries: Vec<(String, Bound<'_, PyAny>)> =
            if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
                if value.len()? > LIMIT {
                    continue;
                }
                value
                    .try_iter()?
                    .enumerate()
                    .map(|(i, v)| Ok((i.to_string(), v?)))
                    .collect::<PyResult<_>>()?
            } else {
                let holder = if value.is_instance_of::<PyDict>() {
                    value
                } else if value.is_instance_of::<PyType>()
                    || value.is_instance_of::<PyModule>()
                    || value.is_instance(FUNCTION.import(py, "types", "FunctionType")?)?
                    || value.is_instance(METHOD.import(py, "types", "MethodType")?)?
                {
                    continue;
                } else {
                    match value.getattr(pyo3::intern!(py, "__dict__")) {
                        Ok(d) if d.is_instance_of::<PyDict>() => d,
                        _ => continue,
                    }
                };
                if holder.len()? > LIMIT {
                    continue;
                }
                items(&holder)?
                    .into_iter()
                    .map(|(k, v)| Ok((k.str()?.to_string(), v)))
                    .collect::<PyResult<_>>()?
            };
        for (k, v) in entries {
            if is_tensor(&v)? {
                out.entry(id(&v)).or_insert_with(|| format!("{name}.{k}"));
            }
        }
    }
    Ok(())
}

/// id -> name of the tensors `frame` binds, directly, as an entry of a dict, list or tuple
/// (`params.0`), as an attribute of an object (`self.w`) or as a parameter of a module
/// (`model.0.weight`): its locals (a `main()` building its tensors and optimizer), then its
/// globals. Before Python 3.13 reading a function's locals leaves a snapshot of them on the
/// frame, which would keep a tensor the function drops later alive: it is emptied. A name that
/// cannot be read ends the reading, never the script.
#[pyfunction]
pub fn bound_names(frame: Option<Bound<'_, PyAny>>) -> HashMap<usize, String> {
    let mut out = HashMap::new();
    let Some(frame) = frame.filter(|f| !f.is_none()) else {
        return out;
    };
    let py = frame.py();
    let mut local = None;
    let _ = (|| -> PyResult<()> {
        let globals = frame.getattr(pyo3::intern!(py, "f_globals"))?;
        let locals = frame.getattr(pyo3::intern!(py, "f_locals"))?;
        local = Some(locals.clone());
        if !locals.is(&globals) {
            name_scope(&locals, &mut out)?;
        }
        name_scope(&globals, &mut out)
    })();
    // Only a function's snapshot (a class body's or an `exec`'s locals are a real namespace;
    // 3.13's function locals are a write-through proxy, no dict).
    if let Some(local) = local.filter(|l| l.is_exact_instance_of::<PyDict>()) {
        let optimized = frame
            .getattr(pyo3::intern!(py, "f_code"))
            .and_then(|c| c.getattr(pyo3::intern!(py, "co_flags")))
            .and_then(|f| f.extract::<u32>())
            .is_ok_and(|f| f & CO_OPTIMIZED != 0);
        if optimized {
            let _ = local.call_method0(pyo3::intern!(py, "clear"));
        }
    }
    out
}

/// The global name the user's frame `frame` binds `module` to (names starting with `_`
/// aside). Locals are not read: on Python 3.11, `frame.f_locals` caches a snapshot on the
/// frame that would keep tensors alive.
fn variable_name(module: &Bound<'_, PyAny>, frame: Option<Bound<'_, PyAny>>) -> Option<String> {
    let frame = frame.filter(|f| !f.is_none())?;
    let globals = frame
        .getattr(pyo3::intern!(module.py(), "f_globals"))
        .ok()?;
    for (name, value) in items(&globals).ok()? {
        let Ok(name) = name.extract::<String>() else {
            continue;
        };
        if value.is(module) && !name.starts_with('_') {
            return Some(name);
        }
    }
    None
}

/// (global name, model) of the outermost model bound to a global name of the user's frame
/// `frame` that `module` is part of, when `module` itself is not bound there: its parameters
/// are then named as that model's `named_parameters()` names them (`backbone.0.weight`, not
/// `Sequential.0.weight`). Globals only, as in [`variable_name`].
fn owner_model<'py>(
    module: &Bound<'py, PyAny>,
    frame: &Bound<'py, PyAny>,
) -> PyResult<Option<(String, Bound<'py, PyAny>)>> {
    let py = module.py();
    let globals = frame.getattr(pyo3::intern!(py, "f_globals"))?;
    let mut best: Option<(String, Bound<'py, PyAny>, usize)> = None;
    for (name, value) in items(&globals)? {
        if value.is(module) {
            return Ok(None);
        }
        let name: String = name.extract()?;
        if name.starts_with('_') || !is_module(&value)? {
            continue;
        }
        let (mut size, mut inside) = (0usize, false);
        for m in value
            .call_method0(pyo3::intern!(py, "modules"))?
            .try_iter()?
        {
            size += 1;
            inside = inside || m?.is(module);
        }
        if inside && best.as_ref().is_none_or(|b| size > b.2) {
            best = Some((name, value, size));
        }
    }
    Ok(best.map(|(n, v, _)| (n, v)))
}

/// A LightningModule, by its protocol: `training_step` and `configure_optimizers`.
fn trains_itself(module: &Bound<'_, PyAny>) -> bool {
    let py = module.py();
    let class = module.get_type();
    let callable = |name| {
        class
            .getattr(name)
            .is_ok_and(|v| !v.is_none() && v.is_callable())
    };
    callable(pyo3::intern!(py, "training_step"))
        && callable(pyo3::intern!(py, "configure_optimizers"))
}

/// The name a model is given: the global name the user's frame binds it to, or its class's.
#[pyfunction]
pub fn model_name(module: &Bound<'_, PyAny>, frame: Option<Bound<'_, PyAny>>) -> PyResult<String> {
    match variable_name(module, frame) {
        Some(n) => Ok(n),
        None => Ok(module.get_type().name()?.to_string()),
    }
}

/// The model a module called as the outermost one is named and scanned as: `(name, model)`,
/// or None when the module is its own. `holder` is the outermost module the registration links
/// show holding it (the recorder's `holder`), `frame` the user's frame that called it.
/// - Held by a LightningModule: named as Lightning names it (its checkpoints and summary,
///   `self.model.parameters()` in `configure_optimizers`), even when a global also binds it.
/// - Part of a model a global of the user's code binds (and not bound itself): that model.
/// - Bound to no name of the user's code at all: the outermost module holding it (a local
///   model, a container of networks).
#[pyfunction]
#[pyo3(signature = (module, holder, frame))]
pub fn root_owner<'py>(
    module: &Bound<'py, PyAny>,
    holder: Option<Bound<'py, PyAny>>,
    frame: Option<Bound<'py, PyAny>>,
) -> PyResult<Option<(String, Bound<'py, PyAny>)>> {
    let frame = frame.filter(|f| !f.is_none());
    let holder = match holder.filter(|h| !h.is_none()) {
        Some(h) => Some((model_name(&h, frame.clone())?, h)),
        None => None,
    };
    if let Some(h) = holder.as_ref().filter(|h| trains_itself(&h.1)) {
        return Ok(Some(h.clone()));
    }
    let Some(frame) = frame else {
        return Ok(holder);
    };
    // A namespace that cannot be read names no owner.
    if let Some(owner) = owner_model(module, &frame).unwrap_or(None) {
        return Ok(Some(owner));
    }
    match variable_name(module, Some(frame)) {
        None => Ok(holder),
        Some(_) => Ok(None),
    }
}

/// Whether `t` is being frozen inside the constructor of the module it belongs to (a fixed
/// table the architecture keeps frozen), not by a training choice made after it was built:
/// up to 64 frames from `frame` outwards.
#[pyfunction]
pub fn in_owner_init(t: &Bound<'_, PyAny>, frame: Option<Bound<'_, PyAny>>) -> PyResult<bool> {
    let mut frame = frame;
    for _ in 0..64 {
        let Some(f) = frame.filter(|f| !f.is_none()) else {
            return Ok(false);
        };
        let py = f.py();
        let code = f.getattr(pyo3::intern!(py, "f_code"))?;
        let name: String = code.getattr(pyo3::intern!(py, "co_name"))?.extract()?;
        if name == "__init__" {
            let owner = f
                .getattr(pyo3::intern!(py, "f_locals"))?
                .call_method1(pyo3::intern!(py, "get"), ("self",))?;
            if is_module(&owner)? {
                let attrs = owner.getattr(pyo3::intern!(py, "__dict__"))?;
                if let Ok(params) = attrs.get_item("_parameters") {
                    for p in params
                        .call_method0(pyo3::intern!(py, "values"))?
                        .try_iter()?
                    {
                        if p?.is(t) {
                            return Ok(true);
                        }
                    }
                }
            }
        }
        frame = Some(f.getattr(pyo3::intern!(py, "f_back"))?);
    }
    Ok(false)
}

/// Checkpoint loaders known by their function, and what their writes are: true, values from
/// the checkpoint (transformers before 4.51 writes them with accelerate's
/// `set_module_tensor_to_device`, a new `nn.Parameter` per key, and no `load_state_dict`);
/// false, storage for the keys a checkpoint lacks, initialised afterwards (transformers 4.5x
/// gives it through `load_state_dict`).
fn known_loader(function: &str) -> Option<bool> {
    match function {
        "_load_state_dict_into_meta_model" => Some(true),
        "_move_missing_keys_from_meta_to_cpu" => Some(false),
        _ => None,
    }
}

/// What the nearest known loader within eight frames of `frame` writes (see
/// [`known_loader`]), None when no known loader is calling.
#[pyfunction]
pub fn loader(frame: Option<Bound<'_, PyAny>>) -> Option<bool> {
    let mut frame = frame;
    for _ in 0..8 {
        let f = frame.filter(|f| !f.is_none())?;
        let py = f.py();
        let name: String = f
            .getattr(pyo3::intern!(py, "f_code"))
            .and_then(|c| c.getattr(pyo3::intern!(py, "co_name")))
            .and_then(|n| n.extract())
            .ok()?;
        if let Some(said) = known_loader(&name) {
            return Some(said);
        }
        frame = f.getattr(pyo3::intern!(py, "f_back")).ok();
    }
    None
}

/// The leaf tensor a non-leaf tensor was computed from, along its first inputs (64 nodes at
/// most), or None.
#[pyfunction]
pub fn leaf_behind<'py>(t: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = t.py();
    let mut node = t.getattr(pyo3::intern!(py, "grad_fn"))?;
    for _ in 0..64 {
        if node.is_none() {
            return Ok(None);
        }
        if let Ok(var) = node.getattr(pyo3::intern!(py, "variable")) {
            if !var.is_none() {
                return Ok(Some(var));
            }
        }
        let mut next = None;
        for edge in node
            .getattr(pyo3::intern!(py, "next_functions"))?
            .try_iter()?
        {
            let n = edge?.get_item(0)?;
            if !n.is_none() {
                next = Some(n);
                break;
            }
        }
        match next {
            Some(n) => node = n,
            None => return Ok(None),
        }
    }
    Ok(None)
}

/// Whether `module` runs on tensors put in place of its parameters: `_parameters` holds only
/// `nn.Parameter`s, except while `torch.func.functional_call` (or `torch.nn.utils.stateless`,
/// a meta-learning library's functional update) writes the tensors it was given there.
#[pyfunction]
pub fn swapped(module: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = module.py();
    let parameter = PARAMETER.import(py, "torch.nn", "Parameter")?;
    let params = module.getattr(pyo3::intern!(py, "_parameters"))?;
    for t in params
        .call_method0(pyo3::intern!(py, "values"))?
        .try_iter()?
    {
        let t = t?;
        if !t.is_none() && !t.get_type().is(parameter) && !t.is_instance(parameter)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `(file, line, qualname)` of a user-defined class; None fields for torch's own. The line is
/// Python's own record (3.13+) or read from the text ([`class_line`]), near
/// the class's first method: `inspect.findsource` parses the whole module, 25 ms for a library
/// model's file. Cached per class for the process.
#[pyfunction]
pub fn class_def(cls: &Bound<'_, PyAny>) -> PyResult<Loc3> {
    let py = cls.py();
    let cache = CLASS_DEFS
        .get_or_init(py, || PyDict::new(py).unbind())
        .bind(py);
    if let Some(known) = cache.get_item(cls)? {
        return known.extract();
    }
    let out = find_class_def(cls)?;
    cache.set_item(cls, out.clone())?;
    Ok(out)
}

fn find_class_def(cls: &Bound<'_, PyAny>) -> PyResult<Loc3> {
    let py = cls.py();
    let none = (None, None, None);
    let module = cls.getattr(pyo3::intern!(py, "__module__"))?;
    let Some(m) = py
        .import("sys")?
        .getattr("modules")?
        .call_method1("get", (module,))
        .ok()
    else {
        return Ok(none);
    };
    let file = match m.getattr(pyo3::intern!(py, "__file__")) {
        Ok(f) if !f.is_none() => f.extract::<String>()?,
        _ => return Ok(none),
    };
    if file.is_empty() {
        return Ok(none);
    }
    let file = abspath(py, &file)?;
    if file.starts_with(torch_dir(py)?.as_str()) {
        return Ok(none);
    }
    let qualname: String = cls.getattr(pyo3::intern!(py, "__qualname__"))?.extract()?;
    let line = match cls.getattr(pyo3::intern!(py, "__firstlineno__")) {
        Ok(l) if !l.is_none() => Some(l.extract::<u32>()?),
        _ => {
            // The first line of the class's own methods defined in this file.
            let own = format!("{qualname}.");
            let mut first: Option<u32> = None;
            let attrs = cls.getattr(pyo3::intern!(py, "__dict__"))?;
            for v in attrs
                .call_method0(pyo3::intern!(py, "values"))?
                .try_iter()?
            {
                let v = v?;
                let f = v.getattr(pyo3::intern!(py, "__func__")).unwrap_or(v);
                let Ok(code) = f.getattr(pyo3::intern!(py, "__code__")) else {
                    continue;
                };
                if code.is_none() {
                    continue;
                }
                let qual: String = match code.getattr(pyo3::intern!(py, "co_qualname")) {
                    Ok(q) => q.extract()?,
                    Err(_) => own.clone(),
                };
                let code_file: String =
                    code.getattr(pyo3::intern!(py, "co_filename"))?.extract()?;
                if qual.starts_with(&own) && abspath(py, &code_file)? == file {
                    let line: u32 = code
                        .getattr(pyo3::intern!(py, "co_firstlineno"))?
                        .extract()?;
                    first = Some(first.map_or(line, |f| f.min(line)));
                }
            }
            class_line(&file, &qualname, first)
        }
    };
    Ok(match line {
        Some(line) => (Some(file), Some(line), Some(qualname)),
        None => none,
    })
}

/// The line a user class's definition starts on ([`gradsleuth_source::SourceCache::class_line`]:
/// read from the text, one read per file for the process), so the tracer's first sight of a
/// model does not parse every module its classes come from, as `inspect.findsource` does.
fn class_line(file: &str, qualname: &str, below: Option<u32>) -> Option<u32> {
    static SOURCES: std::sync::Mutex<Option<gradsleuth_source::SourceCache>> =
        std::sync::Mutex::new(None);
    let mut guard = SOURCES.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .get_or_insert_with(gradsleuth_source::SourceCache::new)
        .class_line(file, qualname, below)
}

/// `(file, line, qualname)` of a module class's `forward`, None fields for torch's own (or
/// none at all).
#[pyfunction]
pub fn forward_def(cls: &Bound<'_, PyAny>) -> PyResult<Loc3> {
    let py = cls.py();
    let none = (None, None, None);
    let Ok(code) = cls
        .getattr(pyo3::intern!(py, "forward"))
        .and_then(|f| f.getattr(pyo3::intern!(py, "__code__")))
    else {
        return Ok(none);
    };
    if code.is_none() {
        return Ok(none);
    }
    let file: String = code.getattr(pyo3::intern!(py, "co_filename"))?.extract()?;
    if file.starts_with(torch_dir(py)?.as_str()) {
        return Ok(none);
    }
    let name = code
        .getattr(pyo3::intern!(py, "co_qualname"))
        .or_else(|_| code.getattr(pyo3::intern!(py, "co_name")))?
        .extract()?;
    let line: u32 = code
        .getattr(pyo3::intern!(py, "co_firstlineno"))?
        .extract()?;
    Ok((Some(abspath(py, &file)?), Some(line), Some(name)))
}

/// Models by key.
type Models<'py> = Vec<(u64, Bound<'py, PyAny>)>;

/// Which of the models seen (`roots`: `(key, module)`) are models of their own, smallest
/// first, and whether their parameters are named under each model's name
/// ([`gradsleuth_capture::holders::models_of_their_own`]).
#[pyfunction]
pub fn models_of_their_own<'py>(roots: Models<'py>) -> PyResult<(Models<'py>, bool)> {
    let mut trees = Vec::with_capacity(roots.len());
    for (key, m) in &roots {
        let py = m.py();
        let modules = m
            .call_method0(pyo3::intern!(py, "modules"))?
            .try_iter()?
            .map(|x| Ok(id(&x?)))
            .collect::<PyResult<Vec<usize>>>()?;
        let has_params = match m
            .call_method0(pyo3::intern!(py, "parameters"))?
            .try_iter()?
            .next()
        {
            Some(p) => p.map(|_| true)?,
            None => false,
        };
        trees.push(gradsleuth_capture::holders::Tree {
            key: *key,
            id: id(m),
            modules,
            has_params,
        });
    }
    let (keys, multi) = gradsleuth_capture::holders::models_of_their_own(&trees);
    let tops = keys
        .into_iter()
        .filter_map(|k| roots.iter().find(|(r, _)| *r == k).cloned())
        .collect();
    Ok((tops, multi))
}
