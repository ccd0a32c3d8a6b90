//! `Watcher`: the Python face of [`gradsleuth_watch::Monitor`]. Python computes the norms
//! (fused foreach reductions on the tensors' device) and hands over a float tensor in host
//! memory, once the device has written it there (a pinned copy, read when its event says it
//! is done); Rust reads that memory ([`host_values`]): no `.tolist()`/`.item()`, no Python
//! float per parameter. Everything else (aggregation, detectors, TensorBoard, the record) is
//! Rust.

use gradsleuth_model::capture::{NanTrace, WatchThresholds};
use gradsleuth_watch::Monitor;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

#[pyclass(module = "gradsleuth._core")]
pub struct Watcher {
    pub(crate) monitor: Monitor,
}

#[pymethods]
impl Watcher {
    /// `params`: (parameter name, layer name) in the order norms will come; `thresholds`: a JSON
    /// object overriding some of the defaults.
    #[new]
    #[pyo3(signature = (params, thresholds=None))]
    fn new(params: Vec<(String, String)>, thresholds: Option<&str>) -> PyResult<Self> {
        let t: WatchThresholds = match thresholds {
            Some(s) => serde_json::from_str(s)
                .map_err(|e| PyValueError::new_err(format!("watch thresholds: {e}")))?,
            None => WatchThresholds::default(),
        };
        Ok(Watcher {
            monitor: Monitor::new(params, t),
        })
    }

    /// One step's gradient norms, from a host tensor: `present[j]` is the parameter whose
    /// norm is `values[j]` (the others had no gradient). Returns (parameters whose gradient is
    /// non-finite for the first time, kinds of anomalies that started now, every parameter
    /// whose gradient is non-finite at this step).
    fn grads_from(
        &mut self,
        present: Vec<usize>,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<(Vec<usize>, Vec<String>, Vec<usize>)> {
        let vals = host_values(values)?;
        let mut norms = vec![None; self.monitor.param_count()];
        for (j, &i) in present.iter().enumerate() {
            if let (Some(slot), Some(&v)) = (norms.get_mut(i), vals.get(j)) {
                *slot = Some(v);
            }
        }
        let v = self.monitor.grads(&norms);
        Ok((v.first_nonfinite, v.new_anomalies, v.nonfinite))
    }

    /// Update-to-weight ratios from a host tensor holding every parameter's update norm, then
    /// every parameter's norm after the step (a zero weight has no ratio).
    fn updates_from(&mut self, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let vals = host_values(values)?;
        let k = vals.len() / 2;
        let ratios: Vec<Option<f64>> = (0..k)
            .map(|i| (vals[k + i] > 0.0).then(|| vals[i] / vals[k + i]))
            .collect();
        self.monitor.updates(&ratios);
        Ok(())
    }

    /// A GradScaler step; true when a skip storm starts.
    fn scaler(&mut self, skipped: bool) -> bool {
        self.monitor.scaler(skipped)
    }

    fn tensorboard(&mut self, dir: &str) -> PyResult<String> {
        self.monitor
            .tensorboard(std::path::Path::new(dir))
            .map_err(PyOSError::new_err)
    }

    /// The first NaN traced (a JSON `NanTrace`).
    fn set_nan(&mut self, trace: &str) -> PyResult<()> {
        let t: NanTrace = serde_json::from_str(trace)
            .map_err(|e| PyValueError::new_err(format!("nan trace: {e}")))?;
        self.monitor.set_nan(t);
        Ok(())
    }

    /// A NaN first seen at `step`, read a step late and not re-run: `how` is `weights` (its
    /// update broke the weights `broken`), `gone` or `end` (see `gradsleuth_watch::late`).
    #[pyo3(signature = (step, params, how, broken=Vec::new()))]
    fn set_late_nan(
        &mut self,
        step: u64,
        params: Vec<String>,
        how: &str,
        broken: Vec<String>,
    ) -> PyResult<()> {
        let late =
            gradsleuth_watch::late::Late::parse(how, broken).map_err(PyValueError::new_err)?;
        self.monitor
            .set_nan(gradsleuth_watch::late::trace(step, params, &late));
        Ok(())
    }

    /// The report of an op-level step armed by the anomaly `kind` at `step`.
    fn add_deep(&mut self, report: PyRef<'_, crate::report::Report>, kind: &str, step: u64) {
        self.monitor.add_deep(report.data(), kind, step);
    }

    fn status_line(&self) -> String {
        self.monitor.status_line()
    }

    #[getter]
    fn steps(&self) -> u64 {
        self.monitor.steps()
    }

    #[getter]
    fn update_every(&self) -> u64 {
        self.monitor.thresholds.update_every.max(1)
    }

    fn anomalies(&self) -> usize {
        self.monitor.anomalies()
    }

    /// The record as JSON (what `Recorder.set_watch` stores in the capture).
    fn record_json(&mut self) -> String {
        serde_json::to_string(&self.monitor.record()).unwrap_or_default()
    }
}

/// The values of a contiguous float32/float64 tensor in host memory, read directly (no Python
/// call per element, no torch read-back op). Anything else is an error, never a guess.
fn host_values(t: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    let device: String = t.getattr("device")?.getattr("type")?.extract()?;
    if device != "cpu" {
        return Err(PyValueError::new_err(format!(
            "host_values: a tensor on {device}, not in host memory"
        )));
    }
    if !t.call_method0("is_contiguous")?.extract::<bool>()? {
        return Err(PyValueError::new_err(
            "host_values: a non-contiguous tensor",
        ));
    }
    let dtype = t.getattr("dtype")?.str()?.to_string();
    let n: usize = t.call_method0("numel")?.extract()?;
    let ptr: usize = t.call_method0("data_ptr")?.extract()?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if ptr == 0 {
        return Err(PyValueError::new_err("host_values: no data"));
    }
    // SAFETY: `t` is a live, contiguous CPU tensor of `n` elements of the checked dtype,
    // starting at `ptr` (torch allocates element-aligned storage); the caller holds a
    // reference to it and the GIL for the whole read, so it is neither freed nor resized.
    let out = match dtype.as_str() {
        "torch.float32" => unsafe { std::slice::from_raw_parts(ptr as *const f32, n) }
            .iter()
            .map(|&x| f64::from(x))
            .collect(),
        "torch.float64" => unsafe { std::slice::from_raw_parts(ptr as *const f64, n) }.to_vec(),
        other => {
            return Err(PyValueError::new_err(format!(
                "host_values: dtype {other} (float32 or float64)"
            )))
        }
    };
    Ok(out)
}

/// What to count on an op's inputs to know whether its derivative is singular there
/// (`"zero"`, `"abs_one"`, `"both_zero"`), or None (see `gradsleuth_watch::singular`).
#[pyfunction]
#[pyo3(signature = (op, exponent, tensor_inputs))]
pub fn singular_condition(
    op: &str,
    exponent: Option<f64>,
    tensor_inputs: usize,
) -> Option<&'static str> {
    gradsleuth_watch::singular::condition(op, exponent, tensor_inputs).map(|c| c.as_str())
}

/// The note on a NaN first seen at `step`, read a step late and re-run where it recurs.
#[pyfunction]
pub fn late_recurs_note(step: u64) -> String {
    gradsleuth_watch::late::note(step, &gradsleuth_watch::late::Late::Recurs)
}

/// Why `op`'s derivative is singular at `count` of its inputs.
#[pyfunction]
#[pyo3(signature = (op, exponent, count))]
pub fn singular_reason(op: &str, exponent: Option<f64>, count: u64) -> Option<String> {
    gradsleuth_watch::singular::reason(op, exponent, count)
}
