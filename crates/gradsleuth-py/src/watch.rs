//! `Watcher`: the Python face of [`gradsleuth_watch::Monitor`]. Python computes the norms
//! (fused foreach reductions on the tensors' device) and hands over a float tensor in host
//! memory, once the device has written it there (a pinned copy, read when its event says it
//! is done); Rust reads that memory ([`host_values`]): no `.tolist()`/`.item()`, no Python
//! float per parameter. Everything else (aggregation, detectors, TensorBoard, the record) is
//! Rust.

use gradsleuth_model::capture::{NanTrace, TensorStats, WatchThresholds};
use gradsleuth_model::finding::Location;
use gradsleuth_watch::Monitor;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::reads::Stats;
use crate::Loc3;

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

    /// The first NaN traced.
    fn set_nan(&mut self, trace: PyRef<'_, Trace>) {
        self.monitor.set_nan(trace.0.clone());
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

/// Where a re-run found the first NaN of a step ([`NanTrace`]), filled in as the re-run
/// learns it and handed to [`Watcher::set_nan`].
#[pyclass(module = "gradsleuth._core")]
pub struct Trace(NanTrace);

/// A singular op a loss probe saw: `(op, site, node, short name, exponent, count)`.
type SingularOp<'py> = (
    String,
    Option<Loc3>,
    String,
    String,
    Option<f64>,
    Bound<'py, PyAny>,
);

fn location(site: Option<Loc3>) -> Option<Location> {
    let (file, line, function) = site?;
    Some(Location {
        function,
        ..Location::new(file.filter(|f| !f.is_empty())?, line.unwrap_or(1))
    })
}

fn stats(inputs: Vec<PyRef<'_, Stats>>) -> Vec<TensorStats> {
    inputs.iter().map(|s| s.0.clone()).collect()
}

#[pymethods]
impl Trace {
    /// A NaN first seen at `step` in the gradients of `params`, re-run now; `late_from`: the
    /// step it was first seen at, read a step late, when this re-run is of the next step where
    /// it recurs.
    #[new]
    #[pyo3(signature = (step, params, late_from=None))]
    fn new(step: u64, params: Vec<String>, late_from: Option<u64>) -> Self {
        Trace(NanTrace {
            step: late_from.unwrap_or(step),
            params,
            method: "replay".into(),
            notes: late_from
                .map(|s| gradsleuth_watch::late::note(s, &gradsleuth_watch::late::Late::Recurs))
                .into_iter()
                .collect(),
            ..NanTrace::default()
        })
    }

    /// Why the re-run could not say more.
    fn note(&mut self, text: String) {
        self.0.notes.push(text);
    }

    /// The forward op that made the first NaN (from finite inputs), with its inputs' statistics.
    fn forward(&mut self, op: String, site: Option<Loc3>, inputs: Vec<PyRef<'_, Stats>>) {
        self.0.forward_op = Some(op);
        self.0.forward_at = location(site);
        self.0.forward_inputs = stats(inputs);
    }

    /// The op whose derivative is infinite at its inputs (`why`): its backward `node` made the
    /// NaN, found from the forward values alone.
    fn singular(
        &mut self,
        op: String,
        site: Option<Loc3>,
        node: String,
        why: String,
        inputs: Vec<PyRef<'_, Stats>>,
    ) {
        self.0.backward_node = Some(node);
        self.0.backward_op = Some(op);
        self.0.backward_at = location(site);
        self.0.forward_inputs = stats(inputs);
        self.0.method = "replay (forward values)".into();
        self.0.notes.push(why);
    }

    /// The first backward `node` whose result was non-finite from finite gradients, and the
    /// forward op that made it.
    fn backward(&mut self, node: String, op: String, site: Option<Loc3>) {
        self.0.backward_node = Some(node);
        self.0.backward_op = Some(op);
        self.0.backward_at = location(site);
    }

    /// The gradient reaching the model's output was already non-finite: the loss code made it.
    #[getter(from_loss)]
    fn loss_made_it(&self) -> bool {
        self.0.from_loss
    }

    #[setter]
    fn set_from_loss(&mut self, value: bool) {
        self.0.from_loss = value;
    }

    /// Whether an op was found (forward or backward).
    #[getter]
    fn found(&self) -> bool {
        self.0.forward_at.is_some() || self.0.backward_at.is_some()
    }

    /// Nothing in the re-run model made the NaN (the step ran the model several times, or not
    /// at all): the step's loss computation, as its probes saw it, did. `forward`: `(op, site,
    /// count of non-finite values it output)` in order; `singular`: `(op, site, node, short
    /// name, exponent, count of inputs at a singular point)`. The first loss op that output a
    /// non-finite value made it; otherwise the last singular op whose inputs met its condition
    /// (the first to run in backward). Counts are 0-d tensors, read only now.
    fn loss_origin(
        &mut self,
        forward: Vec<(String, Option<Loc3>, Bound<'_, PyAny>)>,
        singular: Vec<SingularOp<'_>>,
    ) -> PyResult<()> {
        let count =
            |c: &Bound<'_, PyAny>| -> PyResult<u64> { c.call_method0("__int__")?.extract() };
        for (op, site, c) in forward {
            if count(&c)? > 0 {
                self.0.from_loss = true;
                self.forward(op, site, Vec::new());
                return Ok(());
            }
        }
        for (op, site, node, short, exponent, c) in singular.into_iter().rev() {
            let n = count(&c)?;
            if n > 0 {
                self.0.from_loss = true;
                let why =
                    gradsleuth_watch::singular::reason(&short, exponent, n).unwrap_or_default();
                self.singular(op, site, node, why, Vec::new());
                return Ok(());
            }
        }
        Ok(())
    }

    /// The trace as the report's JSON has it.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::report::as_py(py, &self.0)
    }
}
