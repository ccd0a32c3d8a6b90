//! Findings: the unit of diagnosis shared by runtime checks and lint rules.

use serde::{Deserialize, Serialize};

/// How bad a finding is. Ordered: `Info < Warning < Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// Root cause of a finding; the names are the schema's `category` enum.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Frozen,
    Unused,
    Unregistered,
    NonLeafParam,
    BufferNotParam,
    OptimizerMissing,
    OptimizerStale,
    ZeroGradOrder,
    ScalerSkipped,
    Detach,
    DataAttr,
    NoGrad,
    Rewrap,
    NumpyRoundtrip,
    LossRewrap,
    NonDifferentiable,
    DeadPath,
    InplaceSaved,
    InplaceLeaf,
    GradHook,
    GradClip,
    CreateGraph,
    RecreatedWeights,
    StaleTensor,
    Nan,
    Exploding,
    Vanishing,
    RankDivergence,
    NativeCrash,
    CudaError,
    OutOfMemory,
    Environment,
    #[default]
    Other,
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl Category {
    /// The ways a value leaves autograd: what cuts the parameters behind it off the loss.
    pub const CUTS: &'static [Category] = &[
        Category::Detach,
        Category::DataAttr,
        Category::NoGrad,
        Category::Rewrap,
        Category::NumpyRoundtrip,
        Category::NonDifferentiable,
    ];

    /// The schema name, e.g. `non_leaf_param`.
    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// A place in a source file, 1-based.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Location {
    pub file: String,
    pub line: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_column: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snippet: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
}

impl Location {
    pub fn new(file: impl Into<String>, line: u32) -> Self {
        Location {
            file: file.into(),
            line: line.max(1),
            ..Default::default()
        }
    }
}

/// Path segments of installed packages' folders.
pub const PACKAGE_DIRS: &[&str] = &["/site-packages/", "/dist-packages/"];

/// The installed package code in `file` belongs to: the folder (or module) right under
/// `site-packages`/`dist-packages` (`peft` for `.../site-packages/peft/tuners/lora/model.py`);
/// None for the user's own code.
pub fn package_of(file: &str) -> Option<&str> {
    let rest = PACKAGE_DIRS
        .iter()
        .find_map(|d| file.rfind(d).map(|i| &file[i + d.len()..]))?;
    let top = rest.split(['/', '\\']).next()?;
    let top = top.strip_suffix(".py").unwrap_or(top);
    (!top.is_empty()).then_some(top)
}

/// Another place in the causal chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Related {
    pub location: Location,
    pub message: String,
}

/// What a recognised error means, from `gradsleuth explain`'s knowledge base.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Explanation {
    /// The knowledge-base entry, e.g. `inplace_saved`.
    pub signature: String,
    pub title: String,
    pub meaning: String,
    /// Likely causes, most likely first.
    #[serde(default)]
    pub causes: Vec<String>,
    /// How to check each (commands or a few lines of code).
    #[serde(default)]
    pub checks: Vec<String>,
    #[serde(default)]
    pub fixes: Vec<String>,
    /// Values pulled out of the message (shapes, versions, node names, sizes, ranks).
    #[serde(default)]
    pub fields: std::collections::BTreeMap<String, String>,
    /// gradsleuth categories whose runtime checks find the cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_checks: Vec<String>,
    /// How many times it occurred in the log.
    #[serde(default)]
    pub occurrences: u32,
    /// Where the message text comes from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
}

/// One diagnosed problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Unique within a report (assigned by the analysis, e.g. `F1`).
    pub id: String,
    /// Stable check code, e.g. `GS103`.
    pub code: String,
    pub category: Category,
    pub severity: Severity,
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<Related>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<u32>,
    /// For errors recognised by `explain`: meaning, causes, checks, fixes, fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
}

impl Finding {
    /// A finding with the required fields; the id is assigned when the report is assembled.
    pub fn new(
        code: &str,
        category: Category,
        severity: Severity,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            id: String::new(),
            code: code.to_owned(),
            category,
            severity,
            message: message.into(),
            params: Vec::new(),
            location: None,
            related: Vec::new(),
            chain: Vec::new(),
            fix: None,
            confidence: None,
            steps: Vec::new(),
            ranks: Vec::new(),
            explanation: None,
        }
    }

    pub fn params(mut self, params: impl IntoIterator<Item = String>) -> Self {
        self.params = params.into_iter().collect();
        self
    }

    pub fn at(mut self, location: Option<Location>) -> Self {
        self.location = location;
        self
    }

    pub fn related(mut self, location: Option<Location>, message: impl Into<String>) -> Self {
        if let Some(location) = location {
            self.related.push(Related {
                location,
                message: message.into(),
            });
        }
        self
    }

    pub fn chain(mut self, chain: impl IntoIterator<Item = String>) -> Self {
        self.chain = chain.into_iter().collect();
        self
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    pub fn steps(mut self, steps: impl IntoIterator<Item = u32>) -> Self {
        self.steps = steps.into_iter().collect();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_file_names_its_package() {
        let lib = "/v/lib/python3.11/site-packages/peft/tuners/tuners_utils.py";
        assert_eq!(package_of(lib), Some("peft"));
        assert_eq!(
            package_of("/usr/lib/python3/dist-packages/six.py"),
            Some("six")
        );
        assert_eq!(package_of("/home/u/train.py"), None);
    }

    #[test]
    fn category_names_match_the_schema() {
        assert_eq!(Category::NonLeafParam.as_str(), "non_leaf_param");
        assert_eq!(Category::ZeroGradOrder.as_str(), "zero_grad_order");
        assert!(Severity::Error > Severity::Warning && Severity::Warning > Severity::Info);
    }
}
