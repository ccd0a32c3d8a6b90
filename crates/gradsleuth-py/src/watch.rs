//! `Watcher`: the Python face of [`gradsleuth_watch::Monitor`]. Python computes the norms
//! (fused foreach reductions on the tensors' device) and passes plain floats; everything
//! else (aggregation, detectors, TensorBoard, the record) is Rust.

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

    /// One step's gradient norms (None: no gradient). Returns (indices of parameters whose
    /// gradient is non-finite for the first time, kinds of anomalies that started now).
    fn grads(&mut self, norms: Vec<Option<f64>>) -> (Vec<usize>, Vec<String>) {
        let v = self.monitor.grads(&norms);
        (v.first_nonfinite, v.new_anomalies)
    }

    fn updates(&mut self, ratios: Vec<Option<f64>>) {
        self.monitor.updates(&ratios);
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

/// Why `op`'s derivative is singular at `count` of its inputs.
#[pyfunction]
#[pyo3(signature = (op, exponent, count))]
pub fn singular_reason(op: &str, exponent: Option<f64>, count: u64) -> Option<String> {
    gradsleuth_watch::singular::reason(op, exponent, count)
}
