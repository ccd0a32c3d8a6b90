//! What makes a run good or bad. A run is summarised as an [`Observation`] (its findings,
//! its error, its losses, its exit code); a [`Predicate`] judges it, with the evidence a
//! reader needs to trust the verdict. When the user names no predicate, [`derive`] picks the
//! difference between the two ends: an error only the bad end raises, then a finding only it
//! has, then a loss that moved.

use gradsleuth_model::{Capture, Report, Severity};
use serde::{Deserialize, Serialize};

pub use crate::search::Verdict;

/// A finding as the predicate sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seen {
    pub code: String,
    pub category: String,
    pub severity: Severity,
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<String>,
    /// `file:line`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// One run of the script in one environment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub findings: Vec<Seen>,
    /// `Type: message` of the error the script ended with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub losses: Vec<f64>,
    pub exit_code: i32,
    /// The torch the run imported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<String>,
}

impl Observation {
    /// From `gradsleuth run`'s report (and capture, for the losses) and the exit code.
    pub fn from_run(report: &Report, capture: Option<&Capture>, exit_code: i32) -> Observation {
        Observation {
            findings: report
                .findings
                .iter()
                .map(|f| Seen {
                    code: f.code.clone(),
                    category: f.category.as_str(),
                    severity: f.severity,
                    message: f.message.clone(),
                    params: f.params.clone(),
                    location: f
                        .location
                        .as_ref()
                        .map(|l| format!("{}:{}", l.file, l.line)),
                })
                .collect(),
            error: report
                .error
                .as_ref()
                .map(|e| strip_ansi(&format!("{}: {}", e.kind, e.message))),
            losses: capture.map(|c| c.losses.clone()).unwrap_or_default(),
            exit_code,
            torch: report.environment.torch_version.clone(),
        }
    }

    fn error_line(&self) -> Option<&str> {
        self.error.as_deref().map(|e| e.lines().next().unwrap_or(e))
    }
}

/// Text without terminal escape sequences (torch colours some error messages).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if ('@'..='~').contains(&d) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// What identifies an error across releases: its type and the message's first sentence (the
/// rest often names addresses, paths or advice that changes between releases).
fn error_signature(line: &str) -> String {
    let (kind, message) = line.split_once(": ").unwrap_or(("", line));
    let end = message.find(". ").unwrap_or(message.len());
    let first: String = message[..end].chars().take(120).collect();
    if kind.is_empty() {
        first
    } else {
        format!("{kind}: {first}")
    }
}

/// The user's test of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Predicate {
    /// Bad when a finding matches: a code (`GS201`), a category (`detach`) or a parameter.
    Finding { matches: String },
    /// Bad when the script raises an error whose `Type: message` contains this text.
    Raises { text: String },
    /// Bad when the loss after `step` (1-based; 0 = the last one seen) differs from the good
    /// end's by more than `rel_tol` of it.
    Loss { step: u32, rel_tol: f64 },
    /// Bad when the user's command exits non-zero (125: cannot tell), as `git bisect run`.
    Exit { command: String },
}

impl Predicate {
    /// One line for the report: what "bad" means here.
    pub fn describe(&self) -> String {
        match self {
            Predicate::Finding { matches } => format!("bad when a finding matches `{matches}`"),
            Predicate::Raises { text } => format!("bad when the script raises `{text}`"),
            Predicate::Loss { step, rel_tol } => format!(
                "bad when the loss after {} differs from the good end's by more than {}",
                if *step == 0 {
                    "the last step".to_owned()
                } else {
                    format!("step {step}")
                },
                percent(*rel_tol)
            ),
            Predicate::Exit { command } => format!("bad when `{command}` exits non-zero"),
        }
    }

    /// The symptom, as an issue states it.
    pub fn symptom(&self) -> String {
        match self {
            Predicate::Finding { matches } => {
                format!("gradsleuth reports a finding matching `{matches}`")
            }
            Predicate::Raises { text } => format!("the script raises `{text}`"),
            Predicate::Loss { .. } => format!("the loss changes ({})", self.describe()),
            Predicate::Exit { command } => format!("`{command}` fails"),
        }
    }

    /// Judges a run; `reference` is the good end's run (the loss predicate compares to it).
    pub fn judge(&self, obs: &Observation, reference: Option<&Observation>) -> (Verdict, String) {
        match self {
            Predicate::Finding { matches } => {
                let hit = obs.findings.iter().find(|f| finding_matches(f, matches));
                match (hit, obs.error_line()) {
                    (Some(f), _) => (Verdict::Bad, describe_finding(f)),
                    (None, Some(e))
                        if !obs.findings.iter().any(|f| f.severity >= Severity::Warning) =>
                    {
                        (
                            Verdict::Skip,
                            format!("the script raised `{e}` before the finding could be judged"),
                        )
                    }
                    (None, _) => (Verdict::Good, no_match(obs, matches)),
                }
            }
            Predicate::Raises { text } => match obs.error_line() {
                Some(_)
                    if obs
                        .error
                        .as_deref()
                        .is_some_and(|e| e.contains(text.as_str())) =>
                {
                    (
                        Verdict::Bad,
                        format!("raised `{}`", obs.error_line().unwrap_or_default()),
                    )
                }
                Some(e) => (Verdict::Skip, format!("raised another error: `{e}`")),
                None => (Verdict::Good, "ran without an error".to_owned()),
            },
            Predicate::Loss { step, rel_tol } => {
                let at = |o: &Observation| -> Option<f64> {
                    match *step {
                        0 => o.losses.last().copied(),
                        s => o.losses.get(s as usize - 1).copied(),
                    }
                };
                let Some(value) = at(obs) else {
                    return (
                        Verdict::Skip,
                        match obs.error_line() {
                            Some(e) => format!("no loss recorded: the script raised `{e}`"),
                            None => "no loss recorded (no scalar loss reached backward)".to_owned(),
                        },
                    );
                };
                let Some(base) = reference.and_then(at) else {
                    return (Verdict::Good, format!("loss {}", show(value)));
                };
                if same_value(value, base, *rel_tol) {
                    (
                        Verdict::Good,
                        format!("loss {} (good end {})", show(value), show(base)),
                    )
                } else {
                    (
                        Verdict::Bad,
                        format!(
                            "loss {} against the good end's {} ({})",
                            show(value),
                            show(base),
                            relative(value, base)
                        ),
                    )
                }
            }
            Predicate::Exit { .. } => match obs.exit_code {
                0 => (Verdict::Good, "exit code 0".to_owned()),
                125 => (Verdict::Skip, "exit code 125 (cannot tell)".to_owned()),
                c => (Verdict::Bad, format!("exit code {c}")),
            },
        }
    }
}

/// A finding matches a code, a category or a parameter name (a name, or its last dotted
/// parts: `head.weight` matches `model.head.weight`).
fn finding_matches(f: &Seen, what: &str) -> bool {
    f.code.eq_ignore_ascii_case(what)
        || f.category.eq_ignore_ascii_case(what)
        || f.params
            .iter()
            .any(|p| p == what || p.ends_with(&format!(".{what}")))
}

fn describe_finding(f: &Seen) -> String {
    let at = f
        .location
        .as_deref()
        .map(|l| format!(" at {l}"))
        .unwrap_or_default();
    format!(
        "{} {} ({}): {}{at}",
        f.code,
        f.category,
        f.severity.as_str(),
        f.message
    )
}

fn no_match(obs: &Observation, what: &str) -> String {
    let mut codes: Vec<&str> = obs
        .findings
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
        .map(|f| f.code.as_str())
        .collect();
    codes.sort_unstable();
    codes.dedup();
    if codes.is_empty() {
        format!("no finding matches `{what}` (no warnings or errors)")
    } else {
        format!("no finding matches `{what}` (found {})", codes.join(", "))
    }
}

/// Equal within a relative tolerance; two NaNs (or equal infinities) are the same.
pub fn same_value(a: f64, b: f64, rel_tol: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a == b {
        return true;
    }
    (a - b).abs() <= rel_tol * a.abs().max(b.abs())
}

fn show(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.6}")
    } else {
        format!("{v}")
    }
}

fn percent(r: f64) -> String {
    format!("{}%", r * 100.0)
}

fn relative(v: f64, base: f64) -> String {
    if !v.is_finite() || !base.is_finite() {
        return "not comparable".to_owned();
    }
    if base == 0.0 {
        return format!("{:+}", v - base);
    }
    format!("{:+.3}%", (v - base) / base.abs() * 100.0)
}

/// The difference between the two ends, as a predicate: an error only the bad end raises,
/// else the first warning or error finding only it has (by code), else a loss that differs
/// by more than `rel_tol`. None when the ends cannot be told apart.
pub fn derive(good: &Observation, bad: &Observation, rel_tol: f64) -> Option<Predicate> {
    if let (None, Some(line)) = (good.error_line(), bad.error_line()) {
        return Some(Predicate::Raises {
            text: error_signature(line),
        });
    }
    let has = |o: &Observation, code: &str| o.findings.iter().any(|f| f.code == code);
    if let Some(f) = bad
        .findings
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
        .find(|f| !has(good, &f.code))
    {
        return Some(Predicate::Finding {
            matches: f.code.clone(),
        });
    }
    let p = Predicate::Loss { step: 0, rel_tol };
    if good.error.is_none()
        && bad.error.is_none()
        && !good.losses.is_empty()
        && p.judge(bad, Some(good)).0 == Verdict::Bad
    {
        return Some(p);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(code: &str, category: &str, severity: Severity, params: &[&str]) -> Seen {
        Seen {
            code: code.into(),
            category: category.into(),
            severity,
            message: format!("{category} happened"),
            params: params.iter().map(|s| s.to_string()).collect(),
            location: Some("train.py:12".into()),
        }
    }

    fn obs(findings: Vec<Seen>, error: Option<&str>, losses: &[f64]) -> Observation {
        Observation {
            findings,
            error: error.map(String::from),
            losses: losses.to_vec(),
            exit_code: i32::from(error.is_some()),
            torch: None,
        }
    }

    #[test]
    fn a_finding_matches_by_code_category_or_parameter() {
        let o = obs(
            vec![seen(
                "GS201",
                "detach",
                Severity::Error,
                &["model.head.weight"],
            )],
            None,
            &[],
        );
        for what in [
            "GS201",
            "gs201",
            "detach",
            "head.weight",
            "model.head.weight",
        ] {
            let (v, why) = Predicate::Finding {
                matches: what.into(),
            }
            .judge(&o, None);
            assert_eq!(v, Verdict::Bad, "{what}");
            assert!(why.contains("train.py:12"), "{why}");
        }
        for what in ["GS202", "ad.weight", "frozen"] {
            let (v, why) = Predicate::Finding {
                matches: what.into(),
            }
            .judge(&o, None);
            assert_eq!(v, Verdict::Good, "{what}");
            assert!(why.contains("found GS201"), "{why}");
        }
        // A run that crashed before any finding cannot say the finding is absent.
        let crashed = obs(vec![], Some("ImportError: no module named x"), &[]);
        let (v, why) = Predicate::Finding {
            matches: "GS201".into(),
        }
        .judge(&crashed, None);
        assert_eq!(v, Verdict::Skip);
        assert!(why.contains("ImportError"), "{why}");
    }

    #[test]
    fn errors_are_read_without_colours_and_known_by_their_first_sentence() {
        assert_eq!(strip_ansi("a \u{1b}[1mbold\u{1b}[0m b"), "a bold b");
        let good = obs(vec![], None, &[0.7]);
        let bad = obs(
            vec![],
            Some("UnpicklingError: Weights only load failed. This file can still be loaded, at 0x7f3a"),
            &[],
        );
        assert_eq!(
            derive(&good, &bad, 1e-4),
            Some(Predicate::Raises {
                text: "UnpicklingError: Weights only load failed".into()
            })
        );
    }

    #[test]
    fn raises_tells_its_error_from_another() {
        let p = Predicate::Raises {
            text: "has no attribute 'GradScaler'".into(),
        };
        let mine = obs(
            vec![],
            Some("AttributeError: module 'torch.amp' has no attribute 'GradScaler'"),
            &[],
        );
        let other = obs(vec![], Some("RuntimeError: CUDA out of memory"), &[]);
        assert_eq!(p.judge(&mine, None).0, Verdict::Bad);
        assert_eq!(p.judge(&other, None).0, Verdict::Skip);
        assert_eq!(p.judge(&obs(vec![], None, &[0.5]), None).0, Verdict::Good);
    }

    #[test]
    fn loss_compares_with_the_good_end_within_tolerance() {
        let p = Predicate::Loss {
            step: 2,
            rel_tol: 1e-3,
        };
        let good = obs(vec![], None, &[1.0, 0.5, 0.25]);
        let near = obs(vec![], None, &[1.0, 0.50004, 0.9]);
        let far = obs(vec![], None, &[1.0, 0.6, 0.25]);
        let nan = obs(vec![], None, &[1.0, f64::NAN]);
        assert_eq!(p.judge(&near, Some(&good)).0, Verdict::Good);
        let (v, why) = p.judge(&far, Some(&good));
        assert_eq!(v, Verdict::Bad);
        assert!(why.contains("+20.000%"), "{why}");
        assert_eq!(p.judge(&nan, Some(&good)).0, Verdict::Bad);
        assert_eq!(
            p.judge(&obs(vec![], None, &[1.0]), Some(&good)).0,
            Verdict::Skip
        );
        assert!(same_value(f64::NAN, f64::NAN, 0.0));
    }

    #[test]
    fn exit_codes_read_as_git_bisect_run_reads_them() {
        let p = Predicate::Exit {
            command: "pytest -x".into(),
        };
        let code = |c| Observation {
            exit_code: c,
            ..Default::default()
        };
        assert_eq!(p.judge(&code(0), None).0, Verdict::Good);
        assert_eq!(p.judge(&code(125), None).0, Verdict::Skip);
        assert_eq!(p.judge(&code(3), None).0, Verdict::Bad);
    }

    #[test]
    fn the_ends_difference_becomes_the_predicate() {
        let good = obs(
            vec![seen("GS199", "numerically_invariant", Severity::Info, &[])],
            None,
            &[0.7],
        );
        let raised = obs(vec![], Some("AttributeError: no GradScaler\nmore"), &[]);
        assert_eq!(
            derive(&good, &raised, 1e-4),
            Some(Predicate::Raises {
                text: "AttributeError: no GradScaler".into()
            })
        );
        let finding = obs(
            vec![
                seen("GS199", "numerically_invariant", Severity::Info, &[]),
                seen("GS105", "unused", Severity::Info, &[]),
                seen("GS201", "detach", Severity::Error, &[]),
            ],
            None,
            &[0.7],
        );
        assert_eq!(
            derive(&good, &finding, 1e-4),
            Some(Predicate::Finding {
                matches: "GS201".into()
            })
        );
        let moved = obs(vec![], None, &[0.9]);
        assert_eq!(
            derive(&good, &moved, 1e-4),
            Some(Predicate::Loss {
                step: 0,
                rel_tol: 1e-4
            })
        );
        assert_eq!(derive(&good, &good.clone(), 1e-4), None);
    }
}
