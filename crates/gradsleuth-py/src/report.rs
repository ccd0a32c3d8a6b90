//! `Report`: a diagnosis as a Rust object, holding the report and the capture it came from,
//! so Python never parses or re-serialises it. Findings, parameters and the error reach
//! Python as plain dicts and lists, built from the report's serde form.

use gradsleuth_model::{Capture, Report as ReportData, Severity};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;

/// A diagnosis: `print(report)` shows the terminal report, `.to_json()` the schema's JSON.
#[pyclass(module = "gradsleuth._core", frozen)]
pub struct Report {
    report: ReportData,
    capture: Option<Capture>,
}

impl Report {
    pub fn new(report: ReportData, capture: Option<Capture>) -> Self {
        Report { report, capture }
    }

    pub fn data(&self) -> &ReportData {
        &self.report
    }
}

/// A JSON value as Python objects.
fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (_, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(a) => {
            let l = PyList::empty(py);
            for x in a {
                l.append(to_py(py, x)?)?;
            }
            l.into_any()
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, x) in o {
                d.set_item(k, to_py(py, x)?)?;
            }
            d.into_any()
        }
    })
}

pub(crate) fn as_py<'py, T: serde::Serialize>(
    py: Python<'py>,
    x: &T,
) -> PyResult<Bound<'py, PyAny>> {
    let v = serde_json::to_value(x).map_err(|e| PyValueError::new_err(e.to_string()))?;
    to_py(py, &v)
}

#[pymethods]
impl Report {
    /// A report read from the schema's JSON (and, optionally, the capture's JSON).
    #[staticmethod]
    #[pyo3(signature = (report_json, capture_json=None))]
    fn from_json(report_json: &str, capture_json: Option<&str>) -> PyResult<Self> {
        let report =
            ReportData::from_json(report_json).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let capture = capture_json
            .map(Capture::from_json)
            .transpose()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Report { report, capture })
    }

    /// Every finding, as the schema's objects.
    #[getter]
    fn findings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        as_py(py, &self.report.findings)
    }

    /// One row per parameter (name, shape, status, gradient norms...).
    #[getter]
    fn parameters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        as_py(py, &self.report.parameters)
    }

    /// The exception the training raised, explained; None when it did not raise.
    #[getter]
    fn error<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        as_py(py, &self.report.error)
    }

    #[getter]
    fn steps_observed(&self) -> u32 {
        self.report.steps_observed.unwrap_or(0)
    }

    /// The status of the parameter called `name`.
    fn status(&self, name: &str) -> Option<String> {
        self.report
            .parameters
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.status.as_str().to_owned())
    }

    /// No error or warning findings.
    #[getter]
    fn ok(&self) -> bool {
        !self
            .report
            .findings
            .iter()
            .any(|f| matches!(f.severity, Severity::Error | Severity::Warning))
    }

    fn to_json(&self) -> String {
        self.report.to_json()
    }

    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        as_py(py, &self.report)
    }

    /// Writes the capture, for `gradsleuth report FILE` later.
    fn save_capture(&self, path: &str) -> PyResult<()> {
        let Some(c) = &self.capture else {
            return Err(PyValueError::new_err("this report has no capture"));
        };
        std::fs::write(path, c.to_json())
            .map_err(|e| PyOSError::new_err(format!("cannot write {path}: {e}")))
    }

    /// `text`, `json`, `html` (one self-contained page) or `dot` (Graphviz).
    #[pyo3(signature = (format="text", color=false, all_params=false))]
    fn render(&self, format: &str, color: bool, all_params: bool) -> PyResult<String> {
        crate::render_report(
            &self.report,
            self.capture.as_ref(),
            format,
            color,
            all_params,
        )
    }

    /// Jupyter shows the HTML report.
    fn _repr_html_(&self) -> PyResult<String> {
        self.render("html", false, false)
    }

    fn __str__(&self) -> PyResult<String> {
        self.render("text", false, false)
    }

    fn __repr__(&self) -> String {
        let n = self.report.findings.len();
        format!(
            "<gradsleuth.Report: {n} finding{}, {} steps>",
            if n != 1 { "s" } else { "" },
            self.steps_observed()
        )
    }
}
