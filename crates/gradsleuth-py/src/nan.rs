//! What watch's NaN re-run asks of the ops and tensors it sees: an op's name as the report
//! shows it, whether a tensor is finite or holds a NaN (one reduction, the exact check only
//! when the sum says so), and for an op whose derivative can be infinite at finite inputs
//! ([`gradsleuth_watch::singular`]), how many of its inputs meet that condition, counted on
//! the device and read only when a NaN asks.

use gradsleuth_watch::singular;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyTuple};

/// A floating-point tensor with elements, or None for anything else.
fn floating<'py>(t: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let t = crate::reads::local(t);
    if !crate::scope::is_tensor(&t)?
        || !t.call_method0("is_floating_point")?.is_truthy()?
        || t.call_method0("numel")?.extract::<u64>()? == 0
    {
        return Ok(None);
    }
    Ok(Some(t))
}

/// Whether every element of `t` is finite (anything but a floating-point tensor is): one
/// float64 sum, the exact check only when that sum is not finite (or overflowed).
#[pyfunction]
pub fn finite(t: &Bound<'_, PyAny>) -> PyResult<bool> {
    let Some(t) = floating(t)? else {
        return Ok(true);
    };
    let py = t.py();
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("dtype", py.import("torch")?.getattr("float64")?)?;
    let sum: f64 = t
        .call_method0("detach")?
        .call_method("sum", (), Some(&kwargs))?
        .call_method0("__float__")?
        .extract()?;
    if sum.is_finite() {
        return Ok(true);
    }
    py.import("torch")?
        .call_method1("isfinite", (&t,))?
        .call_method0("all")?
        .is_truthy()
}

/// Whether `t` holds a NaN: any NaN makes the sum NaN (an overflow makes it Inf, or NaN:
/// checked exactly then).
#[pyfunction]
pub fn has_nan(t: &Bound<'_, PyAny>) -> PyResult<bool> {
    let Some(t) = floating(t)? else {
        return Ok(false);
    };
    let sum: f64 = t
        .call_method0("detach")?
        .call_method0("sum")?
        .call_method0("__float__")?
        .extract()?;
    if !sum.is_nan() {
        return Ok(false);
    }
    t.py()
        .import("torch")?
        .call_method1("isnan", (&t,))?
        .call_method0("any")?
        .is_truthy()
}

/// An op as the report names it: `Tensor.add`, `F.relu`, `torch.sqrt`, `module.name`.
#[pyfunction]
pub fn op_name(func: &Bound<'_, PyAny>) -> PyResult<String> {
    let py = func.py();
    let attr = |name: &str| {
        func.getattr(name)
            .ok()
            .filter(|v| v.is_truthy().unwrap_or(false))
    };
    let name = match attr("__name__") {
        Some(n) => n.str()?.to_string(),
        None => func.repr()?.to_string(),
    };
    let bound_to = || func.getattr("__self__").ok().filter(|v| !v.is_none());
    if let Some(owner) = attr("__objclass__").or_else(bound_to) {
        let tensor = crate::scope::tensor_type(py)?;
        let owner_name: String = owner
            .getattr("__name__")
            .and_then(|n| n.extract())
            .unwrap_or_default();
        if owner.is(tensor) || matches!(owner_name.as_str(), "TensorBase" | "_TensorBase") {
            return Ok(format!("Tensor.{name}"));
        }
    }
    let module = match attr("__module__") {
        Some(m) => m.str()?.to_string(),
        None => "torch".to_string(),
    };
    Ok(if module.starts_with("torch.nn.functional") {
        format!("F.{name}")
    } else if module.starts_with("torch") {
        format!("torch.{name}")
    } else {
        format!("{module}.{name}")
    })
}

/// The exponent of a power (`x ** 0.5`, `torch.pow(x, 0.5)`): the second positional argument
/// when it is a plain number.
fn exponent(inputs: &Bound<'_, PyAny>) -> Option<f64> {
    let args = inputs.cast::<PyTuple>().ok()?.get_item(0).ok()?;
    let args = args.cast::<PyTuple>().ok()?;
    let e = args.get_item(1).ok()?;
    if e.is_instance_of::<PyBool>()
        || !(e.is_instance_of::<PyInt>() || e.is_instance_of::<PyFloat>())
    {
        return None;
    }
    e.extract().ok()
}

/// `(short name, exponent, count)` of a singular op's inputs (see [`singular_count`]).
type Singular<'py> = (String, Option<f64>, Bound<'py, PyAny>);

/// For an op whose derivative can be infinite (or 0/0) at finite inputs, `(short name,
/// exponent, count)`: `count` is how many of its inputs meet that condition, a 0-d tensor on
/// their device (nothing is read). None for any other op. `tensors`: its tensor inputs in
/// order; `inputs`: `(args, kwargs)` as the mode received them.
#[pyfunction]
pub fn singular_count<'py>(
    name: &str,
    tensors: Vec<Bound<'py, PyAny>>,
    inputs: &Bound<'py, PyAny>,
) -> PyResult<Option<Singular<'py>>> {
    let short = name.rsplit('.').next().unwrap_or(name).to_string();
    let Some(first) = tensors.first() else {
        return Ok(None);
    };
    if !first.call_method0("is_floating_point")?.is_truthy()? {
        return Ok(None);
    }
    let py = first.py();
    let x = first.call_method0("detach")?;
    let exponent = match matches!(short.as_str(), "pow" | "__pow__" | "float_power") {
        true => exponent(inputs),
        false => None,
    };
    let Some(condition) = singular::condition(&short, exponent, tensors.len()) else {
        return Ok(None);
    };
    let mask = match condition {
        singular::Condition::Zero => x.call_method1("__eq__", (0,))?,
        singular::Condition::AbsOne => x.call_method0("abs")?.call_method1("__eq__", (1,))?,
        singular::Condition::BothZero => {
            let y = tensors[1]
                .call_method0("detach")?
                .call_method1("__eq__", (0,))?;
            x.call_method1("__eq__", (0,))?
                .call_method1("__and__", (y,))?
        }
    };
    let count = py.import("torch")?.call_method1("count_nonzero", (mask,))?;
    Ok(Some((short, exponent, count)))
}

/// Why the derivative of `name` is infinite (or 0/0) at these inputs, or None: the count of
/// [`singular_count`], read now.
#[pyfunction]
pub fn singular_at(
    name: &str,
    tensors: Vec<Bound<'_, PyAny>>,
    inputs: &Bound<'_, PyAny>,
) -> PyResult<Option<String>> {
    let Some((short, exponent, count)) = singular_count(name, tensors, inputs)? else {
        return Ok(None);
    };
    let n: u64 = count.call_method0("__int__")?.extract()?;
    Ok(match n {
        0 => None,
        n => singular::reason(&short, exponent, n),
    })
}
