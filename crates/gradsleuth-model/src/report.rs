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
