//! `gradsleuth._core`: the one place Rust meets Python.
//!
//! The state and the analysis live in `gradsleuth-capture` (the recorder, the op log's
//! analysis), `gradsleuth-analysis` and the renderers; here are the conversions, and what has
//! to be read off live Python objects for the Python hooks, which decide nothing themselves:
//!
//! * [`Recorder`]: the capture buffer (`gradsleuth_capture::Recorder`). The Python tracer's
//!   hooks forward events here and nothing else.
//! * [`oplog::OpLog`]: the op log of a deep step, over live objects through
//!   [`oplog::PyHost`]; `end_step` sorts the step's watched tensors
//!   (`gradsleuth_capture::oplog::step_end`) and attributes them.
//! * [`scope`]: what the user's frames bind (names of tensors and models), which model a layer
//!   called on its own belongs to, where a module's class is defined, checkpoint loaders.
//! * [`reads`]: norms, bit fingerprints and statistics of tensors, one read per list.
//! * [`nan`] and [`watch::Trace`]: watch's NaN re-run: op names, singular-point counts, the
//!   typed trace of where the NaN was born.
//! * [`errors`]: an exception's user site and frames, who holds an unpicklable object.
//! * [`observe`]: repro's description of the values an instrumented script takes.
//! * [`walk`] / [`grad_fn_chain`]: autograd graph walks over live `grad_fn` objects, via the
//!   `gradsleuth-graph` walker.
//! * `analyze` / `render`: the Rust analysis and renderers on a capture.
//! * [`cli_main`]: the `gradsleuth` console script: runs the Rust CLI on `sys.argv`.

use gradsleuth_capture::recorder::{At, ModuleInfo, TensorInfo};
use gradsleuth_model::capture::{DistInfo, ModuleKind, TensorKind};
use gradsleuth_model::Capture;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

mod config;
mod errors;
mod frames;
mod graph;
mod nan;
mod observe;
mod oplog;
mod probe;
mod reads;
mod report;
mod scope;
mod watch;

/// `(file, line, function)` as Python passes a site.
pub(crate) type Loc3 = (Option<String>, Option<u32>, Option<String>);

/// A closed set's member from its schema name (`"detach"`, `"forward"`...).
fn closed<T: serde::de::DeserializeOwned>(what: &str, name: &str) -> PyResult<T> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
        .map_err(|_| PyValueError::new_err(format!("unknown {what} {name:?}")))
}

fn at(l: Loc3) -> At {
    At {
        file: l.0,
        line: l.1,
        function: l.2,
    }
}

/// The capture buffer the tracer writes into: conversions to `gradsleuth_capture::Recorder`.
#[pyclass(module = "gradsleuth._core")]
pub struct Recorder {
    pub(crate) inner: gradsleuth_capture::Recorder,
}

/// What a module is to its model (`ModuleKind.ROOT`, ...).
#[pyclass(module = "gradsleuth._core", name = "ModuleKind", eq, eq_int, frozen)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PyModuleKind {
    #[pyo3(name = "ROOT")]
    Root,
    #[pyo3(name = "REGISTERED")]
    Registered,
    #[pyo3(name = "CONTAINER")]
    Container,
    #[pyo3(name = "ORPHAN")]
    Orphan,
}

impl From<PyModuleKind> for ModuleKind {
    fn from(k: PyModuleKind) -> ModuleKind {
        match k {
            PyModuleKind::Root => ModuleKind::Root,
            PyModuleKind::Registered => ModuleKind::Registered,
            PyModuleKind::Container => ModuleKind::Container,
            PyModuleKind::Orphan => ModuleKind::Orphan,
        }
    }
}

/// What a tracked tensor is (`TensorKind.PARAM`, ...).
#[pyclass(module = "gradsleuth._core", name = "TensorKind", eq, eq_int, frozen)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PyTensorKind {
    #[pyo3(name = "PARAM")]
    Param,
    #[pyo3(name = "CONTAINER")]
    Container,
    #[pyo3(name = "ATTRIBUTE")]
    Attribute,
    #[pyo3(name = "BUFFER")]
    Buffer,
    #[pyo3(name = "ORPHAN")]
    Orphan,
    #[pyo3(name = "FOREIGN")]
    Foreign,
    #[pyo3(name = "HIDDEN")]
    Hidden,
}

impl From<PyTensorKind> for TensorKind {
    fn from(k: PyTensorKind) -> TensorKind {
        match k {
            PyTensorKind::Param => TensorKind::Param,
            PyTensorKind::Container => TensorKind::Container,
            PyTensorKind::Attribute => TensorKind::Attribute,
            PyTensorKind::Buffer => TensorKind::Buffer,
            PyTensorKind::Orphan => TensorKind::Orphan,
            PyTensorKind::Foreign => TensorKind::Foreign,
            PyTensorKind::Hidden => TensorKind::Hidden,
        }
    }
}

#[pymethods]
impl Recorder {
    #[new]
    #[pyo3(signature = (command, steps, script=None, argv=Vec::new()))]
    fn new(command: &str, steps: u32, script: Option<String>, argv: Vec<String>) -> Self {
        Recorder {
            inner: gradsleuth_capture::Recorder::new(command, steps, script, argv),
        }
    }

    #[pyo3(signature = (torch_version, python_version, device))]
    fn set_env(
        &mut self,
        torch_version: Option<String>,
        python_version: Option<String>,
        device: Option<String>,
    ) {
        self.inner.set_env(torch_version, python_version, device);
    }

    /// Adds or updates a module (run counts are kept on update).
    #[pyo3(signature = (*, key, class_, root, name, parent, attr, kind, class_def=(None, None, None), forward_def=(None, None, None)))]
    #[allow(clippy::too_many_arguments)]
    fn module(
        &mut self,
        key: u64,
        class_: String,
        root: Option<u64>,
        name: String,
        parent: Option<u64>,
        attr: String,
        kind: PyRef<'_, PyModuleKind>,
        class_def: Loc3,
        forward_def: Loc3,
    ) {
        self.inner.module(ModuleInfo {
            key,
            class: class_,
            root,
            name,
            parent,
            attr,
            kind: (*kind).into(),
            class_def: at(class_def),
            forward_def: at(forward_def),
        });
    }

    /// A module ran (counted once per root call by the tracer); `stateless`: on tensors put in
    /// place of its own parameters (`torch.func.functional_call`).
    #[pyo3(signature = (key, grad_enabled, stateless = false))]
    fn module_ran(&mut self, key: u64, grad_enabled: bool, stateless: bool) {
        self.inner.module_ran(key, grad_enabled, stateless);
    }

    fn root_call(&mut self) {
        self.inner.root_call();
    }

    /// A sharded tensor (DTensor): how many elements this rank holds.
    fn tensor_shard(&mut self, key: u64, local_numel: u64) {
        self.inner.tensor_shard(key, local_numel);
    }

    /// Where a module was first called from (the line in its parent's forward).
    fn module_site(&mut self, key: u64, site: Loc3) {
        self.inner.module_site(key, &at(site));
    }

    /// One observed iteration's wall time, and whether it ran at op level.
    fn step_time(&mut self, seconds: f64, op_level: bool) {
        self.inner.step_time(seconds, op_level);
    }

    /// A process the script started (its target's name and module, the start method, where).
    fn child_process(&mut self, target: String, module: &str, method: String, site: Loc3) {
        self.inner.child_process(target, module, method, &at(site));
    }

    /// `requires_grad` set on a tensor while observing (from `was`): at the user's line
    /// `site`, through the installed library whose code in file `via` made the call, frozen by
    /// the constructor of its own module (`by_owner`).
    #[pyo3(signature = (key, value, site, via, by_owner, was))]
    fn requires_grad_set(
        &mut self,
        key: u64,
        value: bool,
        site: Loc3,
        via: Option<String>,
        by_owner: bool,
        was: bool,
    ) {
        self.inner
            .requires_grad_set(key, value, &at(site), via.as_deref(), by_owner, was);
    }

    /// A parameter whose values a checkpoint load wrote.
    fn loaded(&mut self, key: u64) {
        self.inner.loaded(key);
    }

    /// Stores the watch monitors' records (one per optimizer) in the capture (the command
    /// becomes `watch`).
    fn set_watch(&mut self, watchers: Vec<PyRefMut<'_, watch::Watcher>>) {
        let records = watchers
            .into_iter()
            .map(|mut w| w.monitor.record())
            .collect();
        self.inner.set_watch(gradsleuth_watch::combine(records));
    }

    /// Distributed: this process's rank in its job.
    #[pyo3(signature = (rank, world_size, local_rank=None, hostname=None))]
    fn set_dist(
        &mut self,
        rank: u32,
        world_size: u32,
        local_rank: Option<u32>,
        hostname: Option<String>,
    ) {
        self.inner.set_dist(DistInfo {
            rank,
            world_size,
            local_rank,
            hostname,
        });
    }

    /// The phase the script is in (see `Progress`).
    fn progress(&mut self, step: u32, phase: &str) -> PyResult<()> {
        self.inner.progress(step, closed("phase", phase)?);
        Ok(())
    }

    /// A module built in a forward: its group (by class and call site) and whether it is new.
    #[pyo3(signature = (*, key, class_id, class_, site, parent, class_def=(None, None, None), forward_def=(None, None, None)))]
    #[allow(clippy::too_many_arguments)]
    fn orphan(
        &mut self,
        key: u64,
        class_id: u64,
        class_: &str,
        site: Loc3,
        parent: Option<u64>,
        class_def: Loc3,
        forward_def: Loc3,
    ) -> (u64, bool) {
        self.inner.orphan(
            key,
            class_id,
            class_,
            &at(site),
            parent,
            &at(class_def),
            &at(forward_def),
        )
    }

    /// A parameter of a new orphan group, named by the group's call site.
    #[pyo3(signature = (*, group, key, attr, shape, dtype, requires_grad, is_leaf))]
    #[allow(clippy::too_many_arguments)]
    fn orphan_param(
        &mut self,
        group: u64,
        key: u64,
        attr: &str,
        shape: Vec<i64>,
        dtype: String,
        requires_grad: bool,
        is_leaf: bool,
    ) {
        self.inner
            .orphan_param(group, key, attr, shape, dtype, requires_grad, is_leaf);
    }

    /// An orphan module's call site (first one kept) and a new instance of it.
    fn orphan_call(&mut self, key: u64, site: Loc3, new_instance: bool) {
        self.inner.orphan_call(key, &at(site), new_instance);
    }

    #[pyo3(signature = (*, key, name, kind, module, attr, shape, dtype, requires_grad, is_leaf, is_parameter, chain=Vec::new(), leaf=None))]
    #[allow(clippy::too_many_arguments)]
    fn tensor(
        &mut self,
        key: u64,
        name: String,
        kind: PyRef<'_, PyTensorKind>,
        module: Option<u64>,
        attr: String,
        shape: Vec<i64>,
        dtype: String,
        requires_grad: bool,
        is_leaf: bool,
        is_parameter: bool,
        chain: Vec<String>,
        leaf: Option<u64>,
    ) {
        self.inner.tensor(TensorInfo {
            key,
            name,
            kind: (*kind).into(),
            module,
            attr,
            shape,
            dtype,
            requires_grad,
            is_leaf,
            is_parameter,
            chain,
            leaf,
        });
    }

    /// A tensor registered earlier is no longer part of any model: `foreign` when an
    /// optimizer still holds it, else `hidden` (kept, not shown).
    fn retire(&mut self, key: u64) {
        self.inner.retire(key);
    }

    fn is_orphan_tensor(&self, key: u64) -> bool {
        self.inner.is_orphan_tensor(key)
    }

    fn has_tensor(&self, key: u64) -> bool {
        self.inner.has_tensor(key)
    }

    /// Whether an optimizer seen so far holds the tensor.
    fn tensor_optimized(&self, key: u64) -> bool {
        self.inner.tensor_optimized(key)
    }

    /// The model root of the module a registered tensor belongs to.
    fn tensor_root(&self, key: u64) -> Option<u64> {
        self.inner.tensor_root(key)
    }

    #[pyo3(signature = (key, class_, created_at, params, lrs, group_sizes=Vec::new()))]
    fn optimizer(
        &mut self,
        key: u64,
        class_: String,
        created_at: Loc3,
        params: Vec<u64>,
        lrs: Vec<f64>,
        group_sizes: Vec<u32>,
    ) {
        self.inner
            .optimizer(key, class_, &at(created_at), params, lrs, group_sizes);
    }

    #[pyo3(signature = (kind, site, loss_grad_fn))]
    fn backward_begin(
        &mut self,
        kind: &str,
        site: Loc3,
        loss_grad_fn: Option<String>,
    ) -> PyResult<()> {
        self.inner
            .backward_begin(closed("backward kind", kind)?, &at(site), loss_grad_fn);
        Ok(())
    }

    /// A post-accumulate-grad hook fired for `key` during the current backward.
    fn reached(&mut self, key: u64) {
        self.inner.reached(key);
    }

    /// During `autograd.grad(create_graph=True)`: the tracked tensors its outputs depend on
    /// (`upstream`) and those its derivatives still depend on (`kept`).
    fn derivative(&mut self, upstream: Vec<u64>, kept: Vec<u64>) {
        self.inner.derivative(&upstream, &kept);
    }

    #[pyo3(signature = (grad_norms, error=None))]
    fn backward_end(&mut self, grad_norms: Vec<(u64, Option<f64>)>, error: Option<String>) {
        self.inner.backward_end(grad_norms, error);
    }

    /// An optimizer step begins; `weight_norms` are the weights before it.
    fn step_pre(&mut self, optimizer: u64, weight_norms: Vec<(u64, f64)>) -> u32 {
        self.inner.step_pre(optimizer, weight_norms)
    }

    /// The step ended: the gradients it used and the weights after it.
    fn step_post(
        &mut self,
        optimizer: u64,
        grad_norms: Vec<(u64, Option<f64>)>,
        weight_norms: Vec<(u64, f64)>,
    ) {
        self.inner.step_post(optimizer, grad_norms, weight_norms);
    }

    /// A cause seen by the tracer itself (a clip bound, a gradient hook, a reused graph).
    #[pyo3(signature = (*, kind, op, site, params, related=(None, None, None), related_message=String::new(), step=0))]
    #[allow(clippy::too_many_arguments)]
    fn add_cut(
        &mut self,
        kind: &str,
        op: String,
        site: Loc3,
        params: Vec<u64>,
        related: Loc3,
        related_message: String,
        step: u32,
    ) -> PyResult<()> {
        self.inner.add_cut(
            closed("cut kind", kind)?,
            op,
            &at(site),
            params,
            &at(related),
            related_message,
            step,
        );
        Ok(())
    }

    /// Whether each tensor changed between before the first observed step and the end of
    /// observation (exact: float64 norms).
    fn weight_changes(&mut self, changes: Vec<(u64, bool)>) {
        self.inner.weight_changes(changes);
    }

    /// `parent.attr = child` (torch's module-registration hook; None: the attribute cleared).
    #[pyo3(signature = (parent, attr, child))]
    fn module_registered(&mut self, parent: u64, attr: &str, child: Option<u64>) {
        self.inner.holders.registered(parent, attr, child);
    }

    /// The outermost module holding `module`, or None.
    fn holder(&self, module: u64) -> Option<u64> {
        self.inner.holders.holder(module)
    }

    /// The orphan group `group` is registered in a model as `path`.
    fn orphan_registered(&mut self, group: u64, path: &str) {
        self.inner.orphan_registered(group, path);
    }

    /// `torch.inference_mode()` was entered at `site` (the user's line).
    fn inference_entered(&mut self, site: Loc3) {
        self.inner.inference_entered(&at(site));
    }

    /// Parameters whose values are all zero at the end of observation.
    fn zero_valued(&mut self, keys: Vec<u64>) {
        self.inner.zero_valued(keys);
    }

    fn zero_grad(&mut self, target: &str, key: u64, site: Loc3) -> PyResult<()> {
        self.inner
            .zero_grad(closed("zero_grad target", target)?, key, &at(site));
        Ok(())
    }

    fn scaler_step(&mut self, optimizer: u64, stepped: bool, scale: Option<f64>, site: Loc3) {
        self.inner.scaler_step(optimizer, stepped, scale, &at(site));
    }

    #[pyo3(signature = (kind, message, site, frames=Vec::new(), holder=None))]
    fn set_error(
        &mut self,
        kind: String,
        message: String,
        site: Loc3,
        frames: Vec<String>,
        holder: Option<String>,
    ) {
        self.inner
            .set_error(kind, message, &at(site), frames, holder);
    }

    fn note(&mut self, text: String) {
        self.inner.note(text);
    }

    /// A probe run (`gradsleuth bisect`): losses and op digests are recorded.
    #[getter]
    fn probe(&self) -> bool {
        self.inner.probe
    }

    #[setter]
    fn set_probe(&mut self, value: bool) {
        self.inner.probe = value;
    }

    /// The loss passed to backward; recorded (one host read) only in a probe run.
    fn loss_value(&mut self, loss: Bound<'_, PyAny>) {
        if self.inner.probe {
            if let Some(v) = probe::scalar(&loss) {
                self.inner.loss_value(v);
            }
        }
    }

    /// Keys of every tensor a backward reached, from backward number `since` on.
    #[pyo3(signature = (since=0))]
    fn reached_keys(&self, since: usize) -> Vec<u64> {
        self.inner.reached_keys(since)
    }

    #[getter]
    fn backward_count(&self) -> usize {
        self.inner.backward_count()
    }

    fn to_json(&self) -> String {
        self.inner.capture.to_json()
    }

    fn save(&self, path: &str) -> PyResult<()> {
        std::fs::write(path, self.inner.capture.to_json())
            .map_err(|e| PyOSError::new_err(format!("cannot write {path}: {e}")))
    }

    /// The report as JSON (the schema's format).
    fn report_json(&self) -> String {
        self.analyzed().to_json()
    }

    /// The diagnosis of what was captured so far, holding a copy of the capture.
    fn report(&self) -> report::Report {
        report::Report::new(self.analyzed(), Some(self.inner.capture.clone()))
    }
}

impl Recorder {
    fn analyzed(&self) -> gradsleuth_model::Report {
        gradsleuth_analysis::analyze_annotated(
            &self.inner.capture,
            gradsleuth_lint::cross_reference,
        )
    }
}

/// Analyses a capture given as JSON; returns the report as JSON.
#[pyfunction]
fn analyze(capture_json: &str) -> PyResult<String> {
    let capture =
        Capture::from_json(capture_json).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(
        gradsleuth_analysis::analyze_annotated(&capture, gradsleuth_lint::cross_reference)
            .to_json(),
    )
}

/// Renders a report (JSON) as `text`, `json`, `html` or `dot` (which needs the capture).
#[pyfunction]
#[pyo3(signature = (report_json, format="text", color=false, all_params=false, capture_json=None))]
fn render(
    report_json: &str,
    format: &str,
    color: bool,
    all_params: bool,
    capture_json: Option<&str>,
) -> PyResult<String> {
    let report = gradsleuth_model::Report::from_json(report_json)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let capture = capture_json.and_then(|c| Capture::from_json(c).ok());
    render_report(&report, capture.as_ref(), format, color, all_params)
}

pub(crate) fn render_report(
    report: &gradsleuth_model::Report,
    capture: Option<&Capture>,
    format: &str,
    color: bool,
    all_params: bool,
) -> PyResult<String> {
    match format {
        "html" => Ok(gradsleuth_render::html(report, capture)),
        "dot" => match capture {
            Some(c) => Ok(gradsleuth_render::graph::dot(c, report)),
            None => Err(PyValueError::new_err("dot needs the capture")),
        },
        "text" => Ok(gradsleuth_render::text(
            report,
            gradsleuth_render::TextOptions { color, all_params },
        )),
        "json" => Ok(gradsleuth_render::json(report)),
        other => Err(PyValueError::new_err(format!(
            "unknown format {other:?} (text, json, html, dot)"
        ))),
    }
}

/// The `gradsleuth` console script: runs the Rust CLI on `argv` (default `sys.argv`).
#[pyfunction]
#[pyo3(signature = (argv=None))]
fn cli_main(py: Python<'_>, argv: Option<Vec<String>>) -> PyResult<i32> {
    let sys = py.import("sys")?;
    let argv: Vec<String> = match argv {
        Some(a) => a,
        None => sys.getattr("argv")?.extract()?,
    };
    // Children find this interpreter and this package.
    let exe: String = sys.getattr("executable")?.extract()?;
    let pkg_dir: Option<String> = py
        .import("gradsleuth")
        .ok()
        .and_then(|m| m.getattr("__path__").ok())
        .and_then(|p| p.get_item(0).ok())
        .and_then(|p| p.extract::<String>().ok())
        .and_then(|p| {
            std::path::Path::new(&p)
                .parent()
                .map(|d| d.to_string_lossy().into_owned())
        });
    // `where` needs torch's folder, not torch: found here without importing it, so the command
    // does not start a second interpreter to ask.
    let torch_dir: Option<String> =
        if matches!(argv.get(1).map(String::as_str), Some("where" | "vscode")) {
            py.import("importlib.util")
                .and_then(|u| u.call_method1("find_spec", ("torch",)))
                .ok()
                .filter(|s| !s.is_none())
                .and_then(|s| s.getattr("submodule_search_locations").ok())
                .and_then(|l| l.get_item(0).ok())
                .and_then(|d| d.extract::<String>().ok())
        } else {
            None
        };
    // SAFETY-free: environment writes happen before any thread of ours is spawned.
    unsafe {
        if let Some(d) = &torch_dir {
            std::env::set_var("GRADSLEUTH_TORCH_DIR", d);
        }
        if std::env::var_os("GRADSLEUTH_PYTHON").is_none() && !exe.is_empty() {
            std::env::set_var("GRADSLEUTH_PYTHON", &exe);
        }
        if let Some(d) = pkg_dir {
            std::env::set_var("GRADSLEUTH_PACKAGE_PATH", d);
        }
    }
    // Ctrl-C goes to the child script; this process waits for it and still prints the report.
    let signal = py.import("signal")?;
    let noop = py.eval(c"lambda *a: None", None, None)?;
    let _ = signal.call_method1("signal", (signal.getattr("SIGINT")?, noop));
    let args: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
    let code = py.detach(|| gradsleuth_cli::main(args));
    Ok(code)
}

/// Why `gradsleuth run` cannot trace under torch `version` (`None` when it can):
/// [`gradsleuth_capture::support::torch_refusal`].
#[pyfunction]
fn torch_refusal(version: &str) -> Option<String> {
    gradsleuth_capture::support::torch_refusal(version)
}

/// The dotted path, with a trailing dot, from `module` through the wrappers around the user's
/// model (`module._orig_mod.`; [`gradsleuth_capture::names::wrapped_attr`]), or "" when it
/// wraps nothing.
#[pyfunction]
fn wrapper_prefix(module: Bound<'_, PyAny>) -> PyResult<String> {
    let py = module.py();
    let nn_module = py.import("torch.nn")?.getattr("Module")?;
    let mut prefix = String::new();
    let mut m = module;
    for _ in 0..8 {
        let class = m.get_type().name()?;
        let Some(attr) = gradsleuth_capture::names::wrapped_attr(&class.to_cow()?) else {
            break;
        };
        let mut inner = Some(m.clone());
        for part in attr.split('.') {
            inner = inner.and_then(|x| x.getattr(part).ok());
        }
        match inner {
            Some(i) if i.is_instance(&nn_module)? => {
                prefix.push_str(attr);
                prefix.push('.');
                m = i;
            }
            _ => break,
        }
    }
    Ok(prefix)
}

/// `name` inside the user's model ([`gradsleuth_capture::names::unwrapped`]).
#[pyfunction]
fn unwrapped(name: &str, prefix: &str) -> String {
    gradsleuth_capture::names::unwrapped(name, prefix)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Recorder>()?;
    m.add_class::<report::Report>()?;
    m.add_class::<config::RunConfig>()?;
    m.add(
        "RUN_CONFIG_ENV",
        gradsleuth_model::run_config::RUN_CONFIG_ENV,
    )?;
    m.add_class::<PyModuleKind>()?;
    m.add_class::<PyTensorKind>()?;
    m.add_class::<watch::Watcher>()?;
    m.add_class::<watch::Trace>()?;
    m.add_class::<reads::Stats>()?;
    m.add_class::<oplog::OpLog>()?;
    m.add_class::<oplog::OpCall>()?;
    m.add_class::<frames::Frames>()?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(render, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(torch_refusal, m)?)?;
    m.add_function(wrap_pyfunction!(wrapper_prefix, m)?)?;
    m.add_function(wrap_pyfunction!(unwrapped, m)?)?;
    m.add_function(wrap_pyfunction!(graph::walk, m)?)?;
    m.add_function(wrap_pyfunction!(nan::finite, m)?)?;
    m.add_function(wrap_pyfunction!(nan::has_nan, m)?)?;
    m.add_function(wrap_pyfunction!(nan::op_name, m)?)?;
    m.add_function(wrap_pyfunction!(nan::singular_count, m)?)?;
    m.add_function(wrap_pyfunction!(nan::singular_at, m)?)?;
    m.add_function(wrap_pyfunction!(reads::norms, m)?)?;
    m.add_function(wrap_pyfunction!(reads::fingerprints, m)?)?;
    m.add_function(wrap_pyfunction!(reads::tensor_stats, m)?)?;
    m.add_function(wrap_pyfunction!(observe::observe, m)?)?;
    m.add_function(wrap_pyfunction!(observe::observe_value, m)?)?;
    m.add_function(wrap_pyfunction!(scope::bound_names, m)?)?;
    m.add_function(wrap_pyfunction!(scope::model_name, m)?)?;
    m.add_function(wrap_pyfunction!(scope::root_owner, m)?)?;
    m.add_function(wrap_pyfunction!(scope::in_owner_init, m)?)?;
    m.add_function(wrap_pyfunction!(scope::loader, m)?)?;
    m.add_function(wrap_pyfunction!(scope::leaf_behind, m)?)?;
    m.add_function(wrap_pyfunction!(scope::swapped, m)?)?;
    m.add_function(wrap_pyfunction!(scope::models_of_their_own, m)?)?;
    m.add_function(wrap_pyfunction!(scope::class_def, m)?)?;
    m.add_function(wrap_pyfunction!(scope::forward_def, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(graph::sequence_index, m)?)?;
    m.add_function(wrap_pyfunction!(graph::grad_fn_chain, m)?)?;
    m.add("NORM_NAN", gradsleuth_analysis::facts::NORM_NAN)?;
    m.add("NORM_INF", gradsleuth_analysis::facts::NORM_INF)?;
    m.add("__version__", gradsleuth_model::TOOL_VERSION)?;
    Ok(())
}
