//! What the tracer reads of tensors' values: norms (one fused `_foreach_norm` per list, one
//! read of the stacked results) and bit fingerprints (whether a weight changed at all).
//! Computed by torch, under `no_grad`; a NaN or infinite norm crosses as
//! [`NORM_NAN`]/[`NORM_INF`] so the capture stays plain JSON.

use gradsleuth_analysis::facts::{NORM_INF, NORM_NAN};
use gradsleuth_model::capture::TensorStats;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyList;

fn encode(x: f64) -> f64 {
    if x.is_nan() {
        NORM_NAN
    } else if x.is_infinite() {
        NORM_INF
    } else {
        x
    }
}

/// An FSDP2 DTensor's local shard (a reduction over it must not trigger collectives), or the
/// tensor itself.
pub(crate) fn local<'py>(t: &Bound<'py, PyAny>) -> Bound<'py, PyAny> {
    t.getattr("_local_tensor").unwrap_or_else(|_| t.clone())
}

/// Runs `f` with gradient recording off, as `with torch.no_grad():` does.
fn no_grad<'py, T>(py: Python<'py>, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    let guard = py.import("torch")?.getattr("no_grad")?.call0()?;
    guard.call_method0("__enter__")?;
    let out = f();
    guard.call_method1("__exit__", (py.None(), py.None(), py.None()))?;
    out
}

/// Whether `e` is one of the errors a reduction raises on tensors it cannot reduce together
/// (mixed devices or dtypes, a sparse tensor, a subclass without the kernel).
fn unreducible(py: Python<'_>, e: &PyErr) -> bool {
    // NotImplementedError is a RuntimeError.
    e.is_instance_of::<PyRuntimeError>(py) || e.is_instance_of::<PyTypeError>(py)
}

/// Norms of `tensors` with one fused reduction (per device/dtype group inside torch), read
/// once; tensors that cannot be reduced together are read one by one in float64.
#[pyfunction]
pub fn norms(py: Python<'_>, tensors: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<f64>> {
    if tensors.is_empty() {
        return Ok(Vec::new());
    }
    let torch = py.import("torch")?;
    let vals: Vec<f64> = no_grad(py, || {
        // One stack and one read; a stack torch refuses (devices, dtypes) or cannot read
        // (a tensor subclass) is read another way.
        let read = |ns: &Bound<'_, PyAny>| -> PyResult<Vec<f64>> {
            torch
                .call_method1("stack", (ns,))?
                .call_method0("tolist")?
                .extract()
        };
        let fused = || -> PyResult<Vec<f64>> {
            let ns = torch.call_method1("_foreach_norm", (PyList::new(py, &tensors)?,))?;
            match read(&ns) {
                Ok(v) => Ok(v),
                Err(e) if e.is_instance_of::<PyRuntimeError>(py) => {
                    let f64 = torch.getattr("float64")?;
                    let host = ns
                        .try_iter()?
                        .map(|n| n?.call_method1("to", (&f64,))?.call_method0("cpu"))
                        .collect::<PyResult<Vec<_>>>()?;
                    read(PyList::new(py, host)?.as_any())
                }
                Err(e) => Err(e),
            }
        };
        match fused() {
            Ok(v) => Ok(v),
            Err(e) if unreducible(py, &e) => tensors
                .iter()
                .map(|t| {
                    let n = if t.getattr("is_sparse")?.is_truthy()? {
                        t.call_method0("coalesce")?
                            .call_method0("values")?
                            .call_method0("norm")?
                    } else {
                        t.call_method0("detach")?
                            .call_method0("double")?
                            .call_method0("norm")?
                    };
                    n.call_method0("__float__")?.extract()
                })
                .collect(),
            Err(e) => Err(e),
        }
    })?;
    Ok(vals.into_iter().map(encode).collect())
}

/// Whether a weight changed *at all* (a small learning rate can move a float32 weight's norm
/// by less than float32 resolves): the wrapping int32 sum of each tensor's bits, as cheap as a
/// norm and with no float64 copy, read once for the list. A tensor whose bits cannot be read
/// as int32 (an odd number of half-precision values, a non-contiguous view, a DTensor) gets
/// its float64 norm.
#[pyfunction]
pub fn fingerprints<'py>(
    py: Python<'py>,
    tensors: Vec<Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if tensors.is_empty() {
        return Ok(Vec::new());
    }
    let torch = py.import("torch")?;
    no_grad(py, || {
        let int32 = torch.getattr("int32")?;
        let f64 = torch.getattr("float64")?;
        let mut out = Vec::with_capacity(tensors.len());
        for t in &tensors {
            let bits = || -> PyResult<Bound<'py, PyAny>> {
                let size: usize = t.call_method0("element_size")?.extract()?;
                let flat = match size {
                    4 => t.clone(),
                    _ => t.call_method1("reshape", (-1,))?,
                };
                let kwargs = pyo3::types::PyDict::new(py);
                kwargs.set_item("dtype", &int32)?;
                flat.call_method1("view", (&int32,))?
                    .call_method("sum", (), Some(&kwargs))
            };
            out.push(match bits() {
                Ok(b) => b,
                Err(e) if unreducible(py, &e) => {
                    let kwargs = pyo3::types::PyDict::new(py);
                    kwargs.set_item("dtype", &f64)?;
                    torch
                        .getattr("linalg")?
                        .getattr("vector_norm")?
                        .call((t.call_method0("detach")?,), Some(&kwargs))?
                }
                Err(e) => return Err(e),
            });
        }
        let read = || -> PyResult<Vec<Bound<'py, PyAny>>> {
            torch
                .call_method1("stack", (&out,))?
                .call_method0("tolist")?
                .try_iter()?
                .collect()
        };
        match read() {
            Ok(v) => Ok(v),
            // Mixed dtypes or devices, or a tensor subclass (a DTensor) `tolist` refuses.
            Err(e) if e.is_instance_of::<PyRuntimeError>(py) => {
                out.iter().map(|v| v.call_method0("item")).collect()
            }
            Err(e) => Err(e),
        }
    })
}

/// Statistics of one tensor (an input of the op a NaN came from), opaque to Python: it goes
/// into a [`crate::watch::Trace`] as it is.
#[pyclass(module = "gradsleuth._core", frozen)]
pub struct Stats(pub(crate) TensorStats);

/// Reads `t`'s statistics ([`TensorStats`]; an FSDP2 DTensor's local shard) with one read of
/// the device for all of them: the usual case, all finite, costs four reductions; a NaN or an
/// Inf (which make the sum, the min or the max non-finite) pays for the exact counts.
#[pyfunction]
pub fn tensor_stats<'py>(py: Python<'py>, t: &Bound<'py, PyAny>) -> PyResult<Stats> {
    let t = local(t).call_method0("detach")?;
    let shape: Vec<i64> = t.getattr("shape")?.extract()?;
    let dtype: String = t.getattr("dtype")?.str()?.to_string();
    let mut s = TensorStats {
        shape,
        dtype: dtype.trim_start_matches("torch.").to_string(),
        ..TensorStats::default()
    };
    let numel: u64 = t.call_method0("numel")?.extract()?;
    let float = t.call_method0("is_floating_point")?.is_truthy()?
        || t.call_method0("is_complex")?.is_truthy()?;
    if !float || numel == 0 {
        return Ok(Stats(s));
    }
    no_grad(py, || {
        let torch = py.import("torch")?;
        let f64 = torch.getattr("float64")?;
        let sum64 = |x: &Bound<'py, PyAny>| -> PyResult<Bound<'py, PyAny>> {
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("dtype", &f64)?;
            x.call_method("sum", (), Some(&kwargs))
        };
        let double = |x: Bound<'py, PyAny>| x.call_method0("double");
        let read = |parts: Vec<Bound<'py, PyAny>>| -> PyResult<Vec<f64>> {
            torch
                .call_method1("stack", (parts,))?
                .call_method0("tolist")?
                .extract()
        };
        let f = t.call_method0("float")?;
        let zeros = f.call_method1("__eq__", (0,))?.call_method0("sum")?;
        let (mn, mx): (Bound<'py, PyAny>, Bound<'py, PyAny>) =
            torch.call_method1("aminmax", (&f,))?.extract()?;
        let v = read(vec![
            sum64(&f)?,
            double(mn)?,
            double(mx)?,
            double(zeros.clone())?,
        ])?;
        if v[..3].iter().all(|x| x.is_finite()) {
            s.zeros = v[3] as u64;
            (s.min, s.max, s.mean) = (Some(v[1]), Some(v[2]), Some(v[0] / numel as f64));
            return Ok(());
        }
        let nan = torch.call_method1("isnan", (&f,))?;
        let inf = torch.call_method1("isinf", (&f,))?;
        let finite = nan
            .call_method1("__or__", (&inf,))?
            .call_method0("__invert__")?;
        let masked = |fill: f64| torch.call_method1("where", (&finite, &f, fill));
        let v = read(vec![
            double(nan.call_method0("sum")?)?,
            double(inf.call_method0("sum")?)?,
            double(zeros)?,
            double(finite.call_method0("sum")?)?,
            double(masked(f64::INFINITY)?.call_method0("amin")?)?,
            double(masked(f64::NEG_INFINITY)?.call_method0("amax")?)?,
            sum64(&masked(0.0)?)?,
        ])?;
        (s.nan, s.inf, s.zeros) = (v[0] as u64, v[1] as u64, v[2] as u64);
        if v[3] > 0.0 {
            (s.min, s.max, s.mean) = (Some(v[4]), Some(v[5]), Some(v[6] / v[3]));
        }
        Ok(())
    })?;
    Ok(Stats(s))
}
