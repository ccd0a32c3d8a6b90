//! `RunConfig`: `gradsleuth run`'s options as the bootstrap reads them
//! (`gradsleuth_model::RunConfig`, a typed file instead of hand-parsed environment variables).

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// What `gradsleuth run` tells the interpreter it starts.
#[pyclass(module = "gradsleuth._core", frozen)]
pub struct RunConfig(gradsleuth_model::RunConfig);

#[pymethods]
impl RunConfig {
    /// The defaults (what a bare `python -m gradsleuth._run SCRIPT` gets).
    #[new]
    fn new() -> Self {
        RunConfig(gradsleuth_model::RunConfig::default())
    }

    /// Reads the file `gradsleuth run` wrote; a clear error for anything else.
    #[staticmethod]
    fn load(path: &str) -> PyResult<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            PyOSError::new_err(format!("cannot read the run configuration {path}: {e}"))
        })?;
        gradsleuth_model::RunConfig::from_json(&text)
            .map(RunConfig)
            .map_err(|e| PyValueError::new_err(format!("run configuration {path}: {e}")))
    }

    #[getter]
    fn capture(&self) -> Option<String> {
        self.0.capture.clone()
    }

    #[getter]
    fn steps(&self) -> u32 {
        self.0.steps
    }

    #[getter]
    fn stop_after(&self) -> bool {
        self.0.stop_after
    }

    #[getter]
    fn deep(&self) -> bool {
        self.0.deep
    }

    #[getter]
    fn watch(&self) -> bool {
        self.0.watch
    }

    #[getter]
    fn tensorboard(&self) -> Option<String> {
        self.0.tensorboard.clone()
    }
}
