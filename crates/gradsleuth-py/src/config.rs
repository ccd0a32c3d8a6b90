//! `RunConfig`: `gradsleuth run`'s options as the bootstrap reads them
//! (`gradsleuth_model::RunConfig`, a typed file instead of hand-parsed environment variables).

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// What `gradsleuth run` tells the interpreter it starts.
#[pyclass(module = "gradsleuth._core", frozen, get_all)]
pub struct RunConfig {
    capture: Option<String>,
    steps: u32,
    stop_after: bool,
    deep: bool,
    watch: bool,
    tensorboard: Option<String>,
    script: Option<String>,
    module: Option<String>,
    refusal: Option<String>,
    probe: bool,
}

impl From<gradsleuth_model::RunConfig> for RunConfig {
    fn from(c: gradsleuth_model::RunConfig) -> Self {
        RunConfig {
            capture: c.capture,
            steps: c.steps,
            stop_after: c.stop_after,
            deep: c.deep,
            watch: c.watch,
            tensorboard: c.tensorboard,
            script: c.script,
            module: c.module,
            refusal: c.refusal,
            probe: c.probe,
        }
    }
}

#[pymethods]
impl RunConfig {
    /// The defaults (what a bare `python -m gradsleuth._run SCRIPT` gets).
    #[new]
    fn new() -> Self {
        gradsleuth_model::RunConfig::default().into()
    }

    /// Reads the file `gradsleuth run` wrote; a clear error for anything else.
    #[staticmethod]
    fn load(path: &str) -> PyResult<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            PyOSError::new_err(format!("cannot read the run configuration {path}: {e}"))
        })?;
        gradsleuth_model::RunConfig::from_json(&text)
            .map(Into::into)
            .map_err(|e| PyValueError::new_err(format!("run configuration {path}: {e}")))
    }

    /// Whether this interpreter runs the job's training program, and how the capture names it
    /// (`gradsleuth_model::run_config::traced_main`); files are compared as Python's
    /// `os.path.realpath` resolves them.
    fn traced_main(
        &self,
        py: Python<'_>,
        argv0: &str,
        orig_argv: Vec<String>,
    ) -> PyResult<Option<String>> {
        let realpath = py.import("os.path")?.getattr("realpath")?;
        let resolve = |p: &str| -> Option<String> { realpath.call1((p,)).ok()?.extract().ok() };
        Ok(gradsleuth_model::run_config::traced_main(
            self.module.as_deref(),
            self.script.as_deref(),
            argv0,
            &orig_argv,
            |a, b| resolve(a).is_some_and(|a| Some(a) == resolve(b)),
        ))
    }
}
