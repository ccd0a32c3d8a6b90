//! The report: what commands print, field for field as `schema/report.schema.json` says.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::capture::{Environment, Target};
use crate::finding::{Finding, Severity};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("not a gradsleuth report: {0}")]
    Malformed(String),
}

/// Per-parameter verdict (the schema's `status` enum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamStatus {
    Learning,
    GradNone,
    GradZero,
    NotUpdated,
    Frozen,
    Unregistered,
    NonLeaf,
    Nan,
}

impl ParamStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamStatus::Learning => "learning",
            ParamStatus::GradNone => "grad_none",
            ParamStatus::GradZero => "grad_zero",
            ParamStatus::NotUpdated => "not_updated",
            ParamStatus::Frozen => "frozen",
            ParamStatus::Unregistered => "unregistered",
            ParamStatus::NonLeaf => "non_leaf",
            ParamStatus::Nan => "nan",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamRow {
    pub name: String,
    #[serde(default)]
    pub shape: Vec<i64>,
    pub status: ParamStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_optimizer: Option<bool>,
    #[serde(default)]
    pub grad_norm: Vec<Option<f64>>,
    #[serde(default)]
    pub update_norm: Vec<Option<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportErrorInfo {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub explained_by: Vec<String>,
    /// What the exception means, when `explain` recognises it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<crate::finding::Explanation>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub schema_version: u32,
    pub tool_version: String,
    pub command: String,
    #[serde(default)]
    pub target: Target,
    #[serde(default)]
    pub environment: Environment,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_observed: Option<u32>,
    #[serde(default)]
    pub parameters: Vec<ParamRow>,
    pub findings: Vec<Finding>,
    #[serde(default)]
    pub error: Option<ReportErrorInfo>,
    /// What observing cost: the observed iterations' wall time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<ObservationCost>,
}

/// The observed window's own cost, as wall time (the same iterations run plainly take less).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObservationCost {
    /// The iterations traced op by op (the slowest: every torch call goes through the log):
    /// how many, and their mean wall time.
    #[serde(default)]
    pub op_level_steps: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_level_seconds: Option<f64>,
    /// Iterations observed with hooks only.
    pub cheap_steps: u32,
    /// Their median wall time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cheap_step_seconds: Option<f64>,
}

impl ObservationCost {
    pub fn of(times: &[crate::capture::StepTime]) -> Option<ObservationCost> {
        if times.is_empty() {
            return None;
        }
        let op: Vec<f64> = times
            .iter()
            .filter(|t| t.op_level)
            .map(|t| t.seconds)
            .collect();
        let mut cheap: Vec<f64> = times
            .iter()
            .filter(|t| !t.op_level)
            .map(|t| t.seconds)
            .collect();
        cheap.sort_by(f64::total_cmp);
        Some(ObservationCost {
            op_level_steps: op.len() as u32,
            op_level_seconds: (!op.is_empty()).then(|| op.iter().sum::<f64>() / op.len() as f64),
            cheap_steps: cheap.len() as u32,
            cheap_step_seconds: (!cheap.is_empty()).then(|| cheap[cheap.len() / 2]),
        })
    }
}

impl Report {
    pub fn new(command: &str) -> Report {
        Report {
            tool: "gradsleuth".into(),
            schema_version: SCHEMA_VERSION,
            tool_version: crate::TOOL_VERSION.into(),
            command: command.into(),
            target: Target::default(),
            environment: Environment::default(),
            steps_observed: None,
            parameters: Vec::new(),
            findings: Vec::new(),
            error: None,
            observation: None,
        }
    }

    /// Numbers findings `F1, F2, ...` in order, most severe first.
    pub fn push_findings(&mut self, mut findings: Vec<Finding>) {
        findings.sort_by(|a, b| {
            b.severity
                .cmp(&a.severity)
                .then_with(|| a.code.cmp(&b.code))
        });
        for f in findings {
            let mut f = f;
            f.id = format!("F{}", self.findings.len() + 1);
            self.findings.push(f);
        }
    }

    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }

    pub fn from_json(text: &str) -> Result<Report, ReportError> {
        serde_json::from_str(text).map_err(|e| ReportError::Malformed(e.to_string()))
    }
}
