//! The finding a reduction must keep: the same code and category, and (when it names
//! parameters) a parameter of the same role, its module's attribute and the parameter's own
//! name (`head.weight` whether the model is `model.head` or `net.encoder.head`).

use gradsleuth_model::{Report, Severity};

#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub code: String,
    pub category: String,
    /// Roles of the parameters the finding names.
    pub roles: Vec<String>,
    pub message: String,
}

/// `model.encoder.head.weight` -> `head.weight`.
pub fn role(name: &str) -> String {
    let parts: Vec<&str> = name.rsplitn(3, '.').collect();
    match parts.as_slice() {
        [last, attr, ..] => format!("{attr}.{last}"),
        _ => name.to_owned(),
    }
}

impl Target {
    /// The finding to keep: the one with `code` if given, else the first error, else the
    /// first warning. Err: what the report has instead.
    pub fn choose(report: &Report, code: Option<&str>) -> Result<Target, String> {
        let pick = match code {
            Some(c) => report
                .findings
                .iter()
                .find(|f| f.code.eq_ignore_ascii_case(c) || f.category.as_str() == c),
            None => report
                .findings
                .iter()
                .find(|f| f.severity == Severity::Error)
                .or_else(|| {
                    report
                        .findings
                        .iter()
                        .find(|f| f.severity == Severity::Warning)
                }),
        };
        match pick {
            Some(f) => Ok(Target {
                code: f.code.clone(),
                category: f.category.as_str(),
                roles: f.params.iter().map(|p| role(p)).collect(),
                message: f.message.clone(),
            }),
            None => {
                let mut codes: Vec<&str> =
                    report.findings.iter().map(|f| f.code.as_str()).collect();
                codes.dedup();
                Err(if codes.is_empty() {
                    "gradsleuth run finds nothing in the observed steps: there is no finding to reproduce".to_owned()
                } else {
                    format!(
                        "no {} finding to reproduce (found {})",
                        code.map_or("warning or error".to_owned(), |c| format!("`{c}`")),
                        codes.join(", ")
                    )
                })
            }
        }
    }

    /// Does a run still show it?
    pub fn holds(&self, report: &Report) -> bool {
        report.findings.iter().any(|f| {
            f.code == self.code
                && f.category.as_str() == self.category
                && (self.roles.is_empty() || f.params.iter().any(|p| self.roles.contains(&role(p))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradsleuth_model::{Category, Finding};

    fn report(findings: Vec<Finding>) -> Report {
        let mut r = Report::new("run");
        r.findings = findings;
        r
    }

    fn finding(code: &str, category: Category, severity: Severity, params: &[&str]) -> Finding {
        let mut f = Finding::new(code, category, severity, "m");
        f.params = params.iter().map(|s| s.to_string()).collect();
        f
    }

    #[test]
    fn keeps_the_code_category_and_the_parameters_role() {
        let original = report(vec![
            finding("GS199", Category::Frozen, Severity::Info, &[]),
            finding(
                "GS201",
                Category::Detach,
                Severity::Error,
                &["model.head.weight", "model.head.bias"],
            ),
        ]);
        let t = Target::choose(&original, None).unwrap();
        assert_eq!((t.code.as_str(), t.roles.len()), ("GS201", 2));
        // The model renamed, the role kept: still the same finding.
        assert!(t.holds(&report(vec![finding(
            "GS201",
            Category::Detach,
            Severity::Error,
            &["net.head.weight"]
        )])));
        // Another module cut off: not the same finding.
        assert!(!t.holds(&report(vec![finding(
            "GS201",
            Category::Detach,
            Severity::Error,
            &["net.body.weight"]
        )])));
        assert!(!t.holds(&report(vec![])));
        assert_eq!(role("weight"), "weight");
    }

    #[test]
    fn says_what_there_is_when_nothing_matches() {
        let r = report(vec![finding(
            "GS199",
            Category::Frozen,
            Severity::Info,
            &[],
        )]);
        assert!(Target::choose(&r, None)
            .unwrap_err()
            .contains("found GS199"));
        assert!(Target::choose(&report(vec![]), None)
            .unwrap_err()
            .contains("finds nothing"));
        assert_eq!(Target::choose(&r, Some("GS199")).unwrap().code, "GS199");
    }
}
