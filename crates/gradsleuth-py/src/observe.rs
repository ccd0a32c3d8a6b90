//! What a script instrumented by `gradsleuth repro` reports of the values it takes
//! (`gradsleuth._oracle.observe` / `observe_value` are these functions): each site's first
//! value described as a [`Value`] (no tensor data: shape, dtype, device, range; literals as
//! Python source; a Hugging Face model as its class and the config entries that differ from
//! the defaults), one JSON line per site, appended to the file `GRADSLEUTH_OBSERVE` names.
//! Nothing here raises into the script: a value that cannot be described is left out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::sync::Mutex;

use gradsleuth_repro::data::{ModelValue, TensorValue, Value};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// Where the observations go (set by the oracle for a first pass), or None.
fn target() -> Option<String> {
    std::env::var("GRADSLEUTH_OBSERVE")
        .ok()
        .filter(|p| !p.is_empty())
}

fn append(path: &str, site: usize, value: &Value) {
    let line = serde_json::json!({ "site": site, "value": value }).to_string();
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

fn qualname(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .qualname()
        .map(|q| q.to_string())
        .unwrap_or_default()
}

/// The value as Python source when it is a literal (exact types only: an enum or a NumPy
/// number is not one): None, a bool, an int or a string of at most 200 characters, a finite
/// float, a tuple of up to eight of those.
fn literal(v: &Bound<'_, PyAny>, depth: usize) -> Option<String> {
    if v.is_none()
        || v.is_exact_instance_of::<PyBool>()
        || v.is_exact_instance_of::<PyInt>()
        || v.is_exact_instance_of::<PyString>()
    {
        let r = v.repr().ok()?.to_string();
        return (r.chars().count() <= 200).then_some(r);
    }
    if v.is_exact_instance_of::<PyFloat>() {
        let x: f64 = v.extract().ok()?;
        return match x.is_finite() {
            true => Some(v.repr().ok()?.to_string()),
            false => None,
        };
    }
    if depth == 0 && v.is_exact_instance_of::<PyTuple>() && v.len().ok()? <= 8 {
        let parts = v
            .try_iter()
            .ok()?
            .map(|x| literal(&x.ok()?, 1))
            .collect::<Option<Vec<_>>>()?;
        let comma = if parts.len() == 1 { "," } else { "" };
        return Some(format!("({}{comma})", parts.join(", ")));
    }
    None
}

fn describe(v: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    let py = v.py();
    if depth > 8 {
        return Ok(Value::Other(qualname(v)));
    }
    if crate::scope::is_tensor(v)? {
        if !v.getattr("grad_fn")?.is_none() {
            // Computed from the model: not data, never rebuilt.
            return Ok(Value::Other("computed tensor".into()));
        }
        let dtype = v.getattr("dtype")?.str()?.to_string();
        let mut t = TensorValue {
            shape: v.getattr("shape")?.extract()?,
            dtype: dtype.trim_start_matches("torch.").to_string(),
            device: v.getattr("device")?.str()?.to_string(),
            grad: v.getattr("requires_grad")?.is_truthy()?,
            min: None,
            max: None,
        };
        let numel: u64 = v.call_method0("numel")?.extract()?;
        if numel > 0 && !v.call_method0("is_complex")?.is_truthy()? {
            let d = v.call_method0("detach")?;
            t.min = Some(
                d.call_method0("min")?
                    .call_method0("__float__")?
                    .extract()?,
            );
            t.max = Some(
                d.call_method0("max")?
                    .call_method0("__float__")?
                    .extract()?,
            );
        }
        return Ok(Value::Tensor(t));
    }
    if v.is_none()
        || v.is_exact_instance_of::<PyBool>()
        || v.is_exact_instance_of::<PyInt>()
        || v.is_exact_instance_of::<PyString>()
        || v.is_exact_instance_of::<PyFloat>()
    {
        return Ok(match literal(v, 0) {
            Some(r) => Value::Literal(r),
            None => Value::Other(qualname(v)),
        });
    }
    if v.is_exact_instance_of::<PyTuple>() || v.is_exact_instance_of::<PyList>() {
        let items = v
            .try_iter()?
            .map(|x| describe(&x?, depth + 1))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(match v.is_exact_instance_of::<PyTuple>() {
            true => Value::Tuple(items),
            false => Value::List(items),
        });
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = d.items().extract()?;
        if pairs.iter().all(|(k, _)| k.is_instance_of::<PyString>()) {
            let entries = pairs
                .iter()
                .map(|(k, x)| Ok((k.extract::<String>()?, describe(x, depth + 1)?)))
                .collect::<PyResult<Vec<_>>>()?;
            return Ok(Value::Dict(entries));
        }
    }
    let transformers = py
        .import("sys")?
        .getattr("modules")?
        .call_method1("get", ("transformers",))?;
    if !transformers.is_none() && v.is_instance(&transformers.getattr("PreTrainedModel")?)? {
        if let Some(m) = model(v)? {
            return Ok(Value::Model(m));
        }
    }
    Ok(Value::Other(qualname(v)))
}

/// `package.Class` when the class is reachable so from its top-level package.
fn exported(cls: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let py = cls.py();
    let module: String = cls.getattr("__module__")?.extract()?;
    let name: String = cls.getattr("__name__")?.extract()?;
    let top = module.split('.').next().unwrap_or_default().to_string();
    let package = py
        .import("sys")?
        .getattr("modules")?
        .call_method1("get", (&top,))?;
    Ok(match package.getattr(name.as_str()) {
        Ok(c) if c.is(cls) => Some(format!("{top}.{name}")),
        _ => None,
    })
}

/// A model built from a config: its class, its config's class, and the config entries that
/// differ from the config class's own defaults (a float32 dtype is the default weights'
/// dtype); None when either class is not importable from its package, or an entry is not
/// JSON.
fn model(v: &Bound<'_, PyAny>) -> PyResult<Option<ModelValue>> {
    let py = v.py();
    let config = v.getattr("config")?;
    let (Some(class), Some(config_class)) = (
        exported(v.get_type().as_any())?,
        exported(config.get_type().as_any())?,
    ) else {
        return Ok(None);
    };
    let defaults = config.get_type().call0()?.call_method0("to_dict")?;
    let defaults = defaults.cast::<PyDict>()?;
    let entries = PyDict::new(py);
    let all = config.call_method0("to_dict")?;
    for (k, x) in all.cast::<PyDict>()?.iter() {
        let key: String = k.extract()?;
        let differs = match defaults.get_item(&k)? {
            Some(d) => d.ne(&x).unwrap_or(true),
            None => true,
        };
        let default_dtype = matches!(key.as_str(), "dtype" | "torch_dtype")
            && (x.is_none() || x.eq("float32").unwrap_or(false));
        let fixed = matches!(
            key.as_str(),
            "transformers_version" | "architectures" | "model_type"
        );
        if differs && !key.starts_with('_') && !fixed && !default_dtype {
            entries.set_item(&k, &x)?;
        }
    }
    let Ok(text) = py
        .import("json")?
        .call_method1("dumps", (&entries,))
        .and_then(|t| t.extract::<String>())
    else {
        return Ok(None);
    };
    let Ok(config) = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(&text) else {
        return Ok(None);
    };
    Ok(Some(ModelValue {
        class,
        config_class,
        config,
    }))
}

static SEEN: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
/// Per site: the literal seen (None once it varied or was not one).
static LITERALS: Mutex<Option<HashMap<usize, Option<String>>>> = Mutex::new(None);

/// Called by an instrumented script: records the first value site `site` sees.
#[pyfunction]
pub fn observe(site: usize, value: &Bound<'_, PyAny>) {
    let Some(path) = target() else {
        return;
    };
    {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.get_or_insert_with(HashSet::new).insert(site) {
            return;
        }
    }
    // An odd value is left as it is, never breaks the run.
    if let Ok(v) = describe(value, 0) {
        append(&path, site, &v);
    }
}

/// Called around an argument by an instrumented script: returns `value`, and records its
/// literal, or that it has none or varied between calls.
#[pyfunction]
pub fn observe_value<'py>(site: usize, value: Bound<'py, PyAny>) -> Bound<'py, PyAny> {
    let Some(path) = target() else {
        return value;
    };
    let r = literal(&value, 0);
    let mut guard = LITERALS.lock().unwrap_or_else(|e| e.into_inner());
    let values = guard.get_or_insert_with(HashMap::new);
    let state = match values.get(&site) {
        None => Some(r),
        Some(Some(old)) if Some(old) != r.as_ref() => Some(None),
        Some(_) => None,
    };
    if let Some(state) = state {
        let described = match &state {
            Some(l) => Value::Literal(l.clone()),
            None => Value::Other("not one literal".into()),
        };
        values.insert(site, state);
        append(&path, site, &described);
    }
    value
}
