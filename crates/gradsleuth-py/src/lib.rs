//! `gradsleuth._core`: the one place Rust meets Python.
//!
//! * [`Recorder`]: the capture buffer. The Python tracer's hooks forward events here and
//!   nothing else; identities are integer keys, never tensors, so the capture keeps nothing
//!   alive. Locations get their snippet and a cwd-relative path here, so a saved capture
//!   renders anywhere.
//! * [`walk`] / [`grad_fn_chain`]: autograd graph walks over live `grad_fn` objects, via the
//!   `gradsleuth-graph` walker.
//! * `analyze` / `render`: the Rust analysis and renderers on a capture.
//! * [`cli_main`]: the `gradsleuth` console script: runs the Rust CLI on `sys.argv`.

use std::collections::HashMap;

use gradsleuth_model::capture::*;
use gradsleuth_model::{Capture, Location};
use gradsleuth_source::SourceCache;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

mod frames;
mod graph;
mod oplog;
mod watch;

type Loc3 = (Option<String>, Option<u32>, Option<String>);

/// The capture buffer the tracer writes into.
#[pyclass(module = "gradsleuth._core")]
pub struct Recorder {
    capture: Capture,
    seq: u64,
    modules: HashMap<u64, usize>,
    tensors: HashMap<u64, usize>,
    optimizers: HashMap<u64, usize>,
    /// Index of the backward in progress.
    current_backward: Option<usize>,
    source: SourceCache,
    cwd: Option<std::path::PathBuf>,
}

impl Recorder {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn loc(
        &mut self,
        file: Option<String>,
        line: Option<u32>,
        function: Option<String>,
    ) -> Option<Location> {
        let file = file?;
        let line = line?;
        let mut loc = self.source.location(&file, line);
        loc.function = function;
        if let Some(cwd) = &self.cwd {
            if let Ok(rel) = std::path::Path::new(&file).strip_prefix(cwd) {
                loc.file = rel.to_string_lossy().into_owned();
            }
        }
        Some(loc)
    }

    fn loc3(&mut self, l: Loc3) -> Option<Location> {
        self.loc(l.0, l.1, l.2)
    }

    fn module_mut(&mut self, key: u64) -> Option<&mut ModuleRec> {
        let i = *self.modules.get(&key)?;
        self.capture.modules.get_mut(i)
    }
}

fn parse_module_kind(s: &str) -> PyResult<ModuleKind> {
    Ok(match s {
        "root" => ModuleKind::Root,
        "registered" => ModuleKind::Registered,
        "container" => ModuleKind::Container,
        "orphan" => ModuleKind::Orphan,
        _ => return Err(PyValueError::new_err(format!("unknown module kind {s:?}"))),
    })
}

fn parse_tensor_kind(s: &str) -> PyResult<TensorKind> {
    Ok(match s {
        "param" => TensorKind::Param,
        "container" => TensorKind::Container,
        "attribute" => TensorKind::Attribute,
        "buffer" => TensorKind::Buffer,
        "orphan" => TensorKind::Orphan,
        "foreign" => TensorKind::Foreign,
        "hidden" => TensorKind::Hidden,
        _ => return Err(PyValueError::new_err(format!("unknown tensor kind {s:?}"))),
    })
}

#[pymethods]
impl Recorder {
    #[new]
    #[pyo3(signature = (command, steps, script=None, argv=Vec::new()))]
    fn new(command: &str, steps: u32, script: Option<String>, argv: Vec<String>) -> Self {
        let mut capture = Capture {
            command: command.to_owned(),
            steps_requested: steps,
            ..Default::default()
        };
        capture.target.script = script;
        capture.target.argv = argv;
        Recorder {
            capture,
            seq: 0,
            modules: HashMap::new(),
            tensors: HashMap::new(),
            optimizers: HashMap::new(),
            current_backward: None,
            source: SourceCache::new(),
            cwd: std::env::current_dir().ok(),
        }
    }

    fn set_env(
        &mut self,
        torch_version: Option<String>,
        python_version: Option<String>,
        device: Option<String>,
    ) {
        self.capture.environment = Environment {
            torch_version,
            python_version,
            device,
        };
    }

    /// Adds or updates a module (run counts are kept on update).
    #[pyo3(signature = (key, class_, root, name, parent, attr, kind, class_def=(None, None, None), forward_def=(None, None, None)))]
    #[allow(clippy::too_many_arguments)]
    fn module(
        &mut self,
        key: u64,
        class_: String,
        root: Option<u64>,
        name: String,
        parent: Option<u64>,
        attr: String,
        kind: &str,
        class_def: Loc3,
        forward_def: Loc3,
    ) -> PyResult<()> {
        let kind = parse_module_kind(kind)?;
        let class_def = self.loc3(class_def);
        let forward_def = self.loc3(forward_def);
        if let Some(m) = self.module_mut(key) {
            m.class = class_;
            m.root = root;
            m.name = name;
            m.parent = parent;
            m.attr = attr;
            m.kind = kind;
            m.class_def = class_def.or(m.class_def.take());
            m.forward_def = forward_def.or(m.forward_def.take());
            return Ok(());
        }
        self.modules.insert(key, self.capture.modules.len());
        self.capture.modules.push(ModuleRec {
            key,
            class: class_,
            root,
            name,
            parent,
            attr,
            kind,
            class_def,
            forward_def,
            ..Default::default()
        });
        Ok(())
    }

    /// A module ran (counted once per root call by the tracer).
    fn module_ran(&mut self, key: u64, grad_enabled: bool) {
        if let Some(m) = self.module_mut(key) {
            m.runs += 1;
            if !grad_enabled {
                m.runs_no_grad += 1;
            }
        }
    }

    fn root_call(&mut self) {
        self.capture.root_calls += 1;
    }

    /// A sharded tensor (DTensor): how many elements this rank holds.
    fn tensor_shard(&mut self, key: u64, local_numel: u64) {
        if let Some(&i) = self.tensors.get(&key) {
            self.capture.tensors[i].local_numel = Some(local_numel);
        }
    }

    /// Where a module was first called from (the line in its parent's forward).
    fn module_site(&mut self, key: u64, site: Loc3) {
        if self.module_mut(key).is_some_and(|m| m.first_call.is_none()) {
            let loc = self.loc3(site);
            if let Some(m) = self.module_mut(key) {
                m.first_call = loc;
            }
        }
    }

    /// Stores the watch monitors' records (one per optimizer) in the capture (the command
    /// becomes `watch`).
    fn set_watch(&mut self, watchers: Vec<PyRefMut<'_, watch::Watcher>>) {
        let records = watchers
            .into_iter()
            .map(|mut w| w.monitor.record())
            .collect();
        self.capture.watch = Some(gradsleuth_watch::combine(records));
        self.capture.command = "watch".into();
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
        self.capture.dist = Some(gradsleuth_model::capture::DistInfo {
            rank,
            world_size,
            local_rank,
            hostname,
        });
    }

    /// The phase the script is in (see `Progress`).
    fn progress(&mut self, step: u32, phase: String) {
        self.capture.progress = Some(gradsleuth_model::capture::Progress { step, phase });
    }

    /// An orphan module's call site (first one kept) and a new instance of it.
    fn orphan_call(&mut self, key: u64, site: Loc3, new_instance: bool) {
        let loc = self.loc3(site);
        if let Some(m) = self.module_mut(key) {
            if m.first_call.is_none() {
                m.first_call = loc;
            }
            if new_instance {
                m.instances += 1;
            }
        }
    }

    #[pyo3(signature = (key, name, kind, module, attr, shape, dtype, requires_grad, is_leaf, is_parameter, chain=Vec::new(), leaf=None))]
    #[allow(clippy::too_many_arguments)]
    fn tensor(
        &mut self,
        key: u64,
        name: String,
        kind: &str,
        module: Option<u64>,
        attr: String,
        shape: Vec<i64>,
        dtype: String,
        requires_grad: bool,
        is_leaf: bool,
        is_parameter: bool,
        chain: Vec<String>,
        leaf: Option<u64>,
    ) -> PyResult<()> {
        let rec = TensorRec {
            key,
            name,
            kind: parse_tensor_kind(kind)?,
            module,
            attr,
            shape,
            dtype,
            requires_grad,
            is_leaf,
            is_parameter,
            grad_fn_chain: chain,
            leaf,
            assigned_at: None,
            local_numel: None,
        };
        match self.tensors.get(&key) {
            Some(&i) => self.capture.tensors[i] = rec,
            None => {
                self.tensors.insert(key, self.capture.tensors.len());
                self.capture.tensors.push(rec);
            }
        }
        Ok(())
    }

    /// A tensor registered earlier is no longer part of any model: `foreign` when an
    /// optimizer still holds it, else `hidden` (kept, not shown).
    fn retire(&mut self, key: u64) {
        let held = self
            .capture
            .optimizers
            .iter()
            .any(|o| o.params.contains(&key));
        if let Some(&i) = self.tensors.get(&key) {
            let t = &mut self.capture.tensors[i];
            t.kind = if held {
                TensorKind::Foreign
            } else {
                TensorKind::Hidden
            };
        }
    }

    fn is_orphan_tensor(&self, key: u64) -> bool {
        self.tensors.get(&key).is_some_and(|&i| {
            matches!(
                self.capture.tensors[i].kind,
                TensorKind::Orphan | TensorKind::Hidden
            )
        })
    }

    fn has_tensor(&self, key: u64) -> bool {
        self.tensors.contains_key(&key)
    }

    #[pyo3(signature = (key, class_, created_at, params, lrs))]
    fn optimizer(
        &mut self,
        key: u64,
        class_: String,
        created_at: Loc3,
        params: Vec<u64>,
        lrs: Vec<f64>,
    ) {
        let created_at = self.loc3(created_at);
        match self.optimizers.get(&key) {
            Some(&i) => {
                let o = &mut self.capture.optimizers[i];
                o.params = params;
                o.lrs = lrs;
                if o.created_at.is_none() {
                    o.created_at = created_at;
                }
            }
            None => {
                self.optimizers.insert(key, self.capture.optimizers.len());
                self.capture.optimizers.push(OptimizerRec {
                    key,
                    class: class_,
                    created_at,
                    params,
                    lrs,
                });
            }
        }
    }

    #[pyo3(signature = (kind, site, loss_grad_fn))]
    fn backward_begin(&mut self, kind: String, site: Loc3, loss_grad_fn: Option<String>) {
        let seq = self.next_seq();
        let location = self.loc3(site);
        self.current_backward = Some(self.capture.backwards.len());
        self.capture.backwards.push(BackwardRec {
            seq,
            kind,
            location,
            loss_grad_fn,
            ..Default::default()
        });
    }

    /// A post-accumulate-grad hook fired for `key` during the current backward.
    fn reached(&mut self, key: u64) {
        if let Some(b) = self
            .current_backward
            .and_then(|i| self.capture.backwards.get_mut(i))
        {
            b.reached.push(key);
        }
    }

    #[pyo3(signature = (grad_norms, error=None))]
    fn backward_end(&mut self, grad_norms: Vec<(u64, Option<f64>)>, error: Option<String>) {
        if let Some(b) = self
            .current_backward
            .take()
            .and_then(|i| self.capture.backwards.get_mut(i))
        {
            b.grad_norms = grad_norms;
            b.error = error;
        }
    }

    /// An optimizer step begins; `weight_norms` are the weights before it.
    fn step_pre(&mut self, optimizer: u64, weight_norms: Vec<(u64, f64)>) -> u32 {
        let seq = self.next_seq();
        let index = self
            .capture
            .steps
            .iter()
            .filter(|s| s.optimizer == optimizer)
            .count() as u32
            + 1;
        self.capture.steps.push(StepRec {
            seq,
            optimizer,
            index,
            grad_norms: Vec::new(),
            weight_before: weight_norms,
            weight_after: Vec::new(),
        });
        index
    }

    /// The step ended: the gradients it used and the weights after it.
    fn step_post(
        &mut self,
        optimizer: u64,
        grad_norms: Vec<(u64, Option<f64>)>,
        weight_norms: Vec<(u64, f64)>,
    ) {
        if let Some(s) = self
            .capture
            .steps
            .iter_mut()
            .rev()
            .find(|s| s.optimizer == optimizer)
        {
            s.grad_norms = grad_norms;
            s.weight_after = weight_norms;
        }
    }

    /// A cause seen by the tracer itself (a clip bound, a gradient hook, a reused graph).
    #[pyo3(signature = (kind, op, site, params, related=(None, None, None), related_message=String::new(), step=0))]
    #[allow(clippy::too_many_arguments)]
    fn add_cut(
        &mut self,
        kind: String,
        op: String,
        site: Loc3,
        params: Vec<u64>,
        related: Loc3,
        related_message: String,
        step: u32,
    ) {
        let location = self.loc3(site);
        let related = self
            .loc3(related)
            .map(|location| {
                vec![gradsleuth_model::Related {
                    location,
                    message: related_message,
                }]
            })
            .unwrap_or_default();
        self.capture.cuts.push(gradsleuth_model::capture::CutRec {
            kind,
            op,
            location,
            related,
            params,
            chain: Vec::new(),
            step,
        });
    }

    /// Whether each tensor changed between before the first observed step and the end of
    /// observation (exact: float64 norms).
    fn weight_changes(&mut self, changes: Vec<(u64, bool)>) {
        self.capture.weight_changes.extend(changes);
    }

    fn zero_grad(&mut self, target: String, key: u64, site: Loc3) {
        let seq = self.next_seq();
        let location = self.loc3(site);
        self.capture.zero_grads.push(ZeroGradRec {
            seq,
            target,
            key,
            location,
        });
    }

    fn scaler_step(&mut self, optimizer: u64, stepped: bool, scale: Option<f64>, site: Loc3) {
        let seq = self.next_seq();
        let location = self.loc3(site);
        self.capture.scaler_steps.push(ScalerStepRec {
            seq,
            optimizer,
            stepped,
            scale,
            location,
        });
    }

    fn set_error(&mut self, kind: String, message: String, site: Loc3) {
        let location = self.loc3(site);
        self.capture.error = Some(ScriptError {
            kind,
            message,
            location,
        });
    }

    fn note(&mut self, text: String) {
        if self.capture.notes.len() < 100 {
            self.capture.notes.push(text);
        }
    }

    /// Keys of every tensor a backward reached, from backward number `since` on.
    #[pyo3(signature = (since=0))]
    fn reached_keys(&self, since: usize) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .capture
            .backwards
            .iter()
            .skip(since)
            .flat_map(|b| b.reached.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    #[getter]
    fn backward_count(&self) -> usize {
        self.capture.backwards.len()
    }

    fn to_json(&self) -> String {
        self.capture.to_json()
    }

    fn save(&self, path: &str) -> PyResult<()> {
        std::fs::write(path, self.capture.to_json())
            .map_err(|e| PyOSError::new_err(format!("cannot write {path}: {e}")))
    }

    /// The report as JSON (the schema's format).
    fn report_json(&self) -> String {
        gradsleuth_analysis::analyze(&self.capture).to_json()
    }
}

/// Analyses a capture given as JSON; returns the report as JSON.
#[pyfunction]
fn analyze(capture_json: &str) -> PyResult<String> {
    let capture =
        Capture::from_json(capture_json).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(gradsleuth_analysis::analyze(&capture).to_json())
}

/// Renders a report (JSON) as `text` or `json`.
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
    match format {
        "html" => Ok(gradsleuth_render::html(&report, capture.as_ref())),
        "dot" => match &capture {
            Some(c) => Ok(gradsleuth_render::graph::dot(c, &report)),
            None => Err(PyValueError::new_err("dot needs the capture")),
        },
        "text" => Ok(gradsleuth_render::text(
            &report,
            gradsleuth_render::TextOptions { color, all_params },
        )),
        "json" => Ok(gradsleuth_render::json(&report)),
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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Recorder>()?;
    m.add_class::<watch::Watcher>()?;
    m.add_class::<oplog::OpLog>()?;
    m.add_class::<frames::Frames>()?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(render, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(graph::walk, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(graph::sequence_index, m)?)?;
    m.add_function(wrap_pyfunction!(graph::grad_fn_chain, m)?)?;
    m.add("NORM_NAN", gradsleuth_analysis::facts::NORM_NAN)?;
    m.add("NORM_INF", gradsleuth_analysis::facts::NORM_INF)?;
    m.add("__version__", gradsleuth_model::TOOL_VERSION)?;
    Ok(())
}
