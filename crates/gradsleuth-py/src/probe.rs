//! What a probe run (`gradsleuth bisect`) reads off live values: each output of an op summarised
//! (shape, dtype, float64 sum and norm), and a scalar loss's value. Host reads, so only probe
//! runs make them; the recorder keeps them (`gradsleuth_capture::Recorder::op_digest`).
//!
//! Called inside the mode's `__torch_function__`, where torch has popped the mode: the reads
//! are not recorded as ops, and `detach()` keeps them out of autograd; no random number is
//! drawn, so the user's run is unchanged.

use gradsleuth_model::capture::TensorDigest;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyTuple};

/// Outputs looked into per op (a tuple or list of tensors).
const ITEMS: usize = 16;

/// The digests of an op's result: a tensor, a Python number, or a tuple/list of those.
pub fn digests(
    py: Python<'_>,
    out: &Bound<'_, PyAny>,
    tensor_type: &Bound<'_, PyAny>,
) -> Vec<TensorDigest> {
    let mut v = Vec::new();
    let one = |x: &Bound<'_, PyAny>, v: &mut Vec<TensorDigest>| {
        if x.is_instance(tensor_type).unwrap_or(false) {
            v.push(tensor(py, x));
        } else if x.is_instance_of::<PyFloat>()
            || x.is_instance_of::<PyInt>()
            || x.is_instance_of::<PyBool>()
        {
            let value: f64 = x.extract().unwrap_or(f64::NAN);
            v.push(TensorDigest {
                shape: Vec::new(),
                dtype: x
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
                sum: value,
                norm: value.abs(),
            });
        }
    };
    if out.is_instance_of::<PyTuple>() || out.is_instance_of::<PyList>() {
        if let Ok(items) = out.try_iter() {
            for x in items.take(ITEMS).flatten() {
                one(&x, &mut v);
            }
        }
    } else {
        one(out, &mut v);
    }
    v
}

/// A tensor's digest; NaN sums when it cannot be read (a meta, sparse or quantized tensor):
/// such a tensor reads the same way in both runs.
fn tensor(py: Python<'_>, t: &Bound<'_, PyAny>) -> TensorDigest {
    let shape: Vec<i64> = t
        .getattr("shape")
        .and_then(|s| s.extract())
        .unwrap_or_default();
    let dtype = t
        .getattr("dtype")
        .and_then(|d| d.str().map(|s| s.to_string()))
        .unwrap_or_default();
    let values = || -> PyResult<(f64, f64)> {
        let torch = py.import("torch")?;
        let mut d = t.call_method0("detach")?;
        if d.call_method0("is_complex")?.is_truthy()? {
            d = d.getattr("real")?;
        }
        let d = d.call_method1("to", (torch.getattr("float64")?,))?;
        let both = torch
            .getattr("stack")?
            .call1(((d.call_method0("sum")?, d.call_method0("norm")?),))?;
        let v: Vec<f64> = both.call_method0("tolist")?.extract()?;
        match v.as_slice() {
            [s, n] => Ok((*s, *n)),
            _ => Ok((f64::NAN, f64::NAN)),
        }
    };
    let (sum, norm) = values().unwrap_or((f64::NAN, f64::NAN));
    TensorDigest {
        shape,
        dtype,
        sum,
        norm,
    }
}

/// The value of a one-element tensor (a loss), else None.
pub fn scalar(t: &Bound<'_, PyAny>) -> Option<f64> {
    let n: i64 = t.call_method0("numel").ok()?.extract().ok()?;
    if n != 1 {
        return None;
    }
    t.call_method0("detach")
        .and_then(|d| d.call_method0("item"))
        .and_then(|v| v.extract())
        .ok()
}
