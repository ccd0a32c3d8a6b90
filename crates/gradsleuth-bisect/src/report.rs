//! The bisect report: every candidate tried with its verdict and evidence, the first bad
//! one and its good neighbour, the first op whose result differs between them, the
//! environment; as text, as JSON, and as the header of an issue to paste.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::diverge::{Difference, Divergence};
use crate::predicate::Predicate;
use crate::search::Verdict;

/// Format name of the JSON report.
pub const BISECT_FORMAT: &str = "gradsleuth-bisect";

/// One candidate run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tried {
    /// The release (`2.3.0`) or commit (abbreviated hash and subject).
    pub candidate: String,
    pub verdict: Verdict,
    pub evidence: String,
    pub seconds: f64,
    /// The script's output and gradsleuth's report for this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// A commit's subject line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// What `gradsleuth bisect` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BisectReport {
    pub format: String,
    pub tool_version: String,
    /// `release` (versions of a package) or `commit` (the user's repository).
    pub over: String,
    /// The package whose releases were searched (None for commits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    pub command: Vec<String>,
    pub predicate: Predicate,
    /// True when the predicate was read off the difference between the two ends.
    pub predicate_derived: bool,
    /// Candidates in search order, from the good end to the bad end.
    pub candidates: Vec<String>,
    pub last_good: Option<String>,
    pub first_bad: Option<String>,
    /// Candidates between the two that could not be judged: the first bad one may be any of
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<String>,
    /// In the order they were tried.
    pub tried: Vec<Tried>,
    #[serde(default)]
    pub divergence: Option<Divergence>,
    /// Why there is no divergence (the steps agree, or a run recorded no op).
    #[serde(default)]
    pub divergence_note: Option<String>,
    pub environment: BTreeMap<String, String>,
    /// What the reader should know about how candidates were installed or run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl BisectReport {
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into()) + "\n"
    }

    fn name(&self, candidate: &str) -> String {
        match &self.package {
            Some(p) => format!("{p} {candidate}"),
            None => match self
                .tried(Some(candidate))
                .and_then(|t| t.subject.as_deref())
            {
                Some(subject) => format!("commit {candidate} ({subject})"),
                None => format!("commit {candidate}"),
            },
        }
    }

    fn tried(&self, candidate: Option<&str>) -> Option<&Tried> {
        let c = candidate?;
        self.tried.iter().rev().find(|t| t.candidate == c)
    }

    /// The terminal report.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let what = match &self.package {
            Some(p) => format!("{} releases of {p}", self.candidates.len()),
            None => format!("{} commits", self.candidates.len()),
        };
        let _ = writeln!(
            s,
            "gradsleuth bisect: {what}, {}{}",
            self.predicate.describe(),
            if self.predicate_derived {
                " (the difference between the two ends)"
            } else {
                ""
            }
        );
        let width = self
            .tried
            .iter()
            .map(|t| t.candidate.len())
            .max()
            .unwrap_or(0);
        for t in &self.tried {
            let _ = writeln!(
                s,
                "  {:<width$}  {:<4}  {}  ({:.1} s)",
                t.candidate,
                t.verdict.as_str(),
                t.evidence,
                t.seconds
            );
        }
        match (&self.last_good, &self.first_bad) {
            (Some(good), Some(bad)) => {
                if self.undecided.is_empty() {
                    let _ = writeln!(s, "\nFirst bad: {} (last good: {good})", self.name(bad));
                } else {
                    let _ = writeln!(
                        s,
                        "\nFirst bad: {} or one of {} that could not be tried (last good: {good})",
                        self.name(bad),
                        self.undecided.join(", ")
                    );
                }
                if let Some(t) = self.tried(Some(bad)) {
                    let _ = writeln!(s, "  {bad}: {}", t.evidence);
                }
                if let Some(t) = self.tried(Some(good)) {
                    let _ = writeln!(s, "  {good}: {}", t.evidence);
                }
            }
            _ => {
                let _ = writeln!(s, "\nNo first bad candidate was found.");
            }
        }
        if let Some(d) = &self.divergence {
            let _ = writeln!(s, "\nFirst op whose result differs (first step):");
            let _ = writeln!(s, "  {}", divergence_line(d));
        } else if let Some(note) = &self.divergence_note {
            let _ = writeln!(s, "\n{note}");
        }
        for note in &self.notes {
            let _ = writeln!(s, "\nNote: {note}");
        }
        let _ = writeln!(s, "\nEnvironment: {}", environment_line(&self.environment));
        let _ = writeln!(
            s,
            "(--format issue: this as an issue to paste; --format json: every run's evidence)"
        );
        s
    }

    /// The header of an issue for the package's maintainers (or the user's own tracker), in
    /// Markdown: what changed, where, the evidence, and how it was found.
    pub fn issue(&self) -> String {
        let mut s = String::new();
        let (Some(good), Some(bad)) = (&self.last_good, &self.first_bad) else {
            let _ = writeln!(s, "gradsleuth bisect found no first bad candidate.");
            return s;
        };
        let _ = writeln!(
            s,
            "### {} changes this script's behaviour (last good: {good})\n",
            self.name(bad)
        );
        let _ = writeln!(s, "**Problem.** {}.", self.predicate.symptom());
        if let Some(t) = self.tried(Some(bad)) {
            let _ = writeln!(s, "- with {}: {}", self.name(bad), t.evidence);
        }
        if let Some(t) = self.tried(Some(good)) {
            let _ = writeln!(s, "- with {}: {}", self.name(good), t.evidence);
        }
        if !self.undecided.is_empty() {
            let _ = writeln!(
                s,
                "- not testable here, so possibly the first bad one: {}",
                self.undecided.join(", ")
            );
        }
        if let Some(d) = &self.divergence {
            let _ = writeln!(
                s,
                "\n**First differing op** (first training step): {}",
                divergence_line(d)
            );
        }
        if !self.command.is_empty() {
            let python = if self.command[0].ends_with(".py") {
                "python "
            } else {
                ""
            };
            let _ = writeln!(s, "\n**Reproduce.** `{python}{}`", self.command.join(" "));
        }
        let verdicts: Vec<String> = self
            .tried
            .iter()
            .map(|t| format!("{} {}", t.candidate, t.verdict.as_str()))
            .collect();
        let _ = writeln!(
            s,
            "\n**Bisected** with gradsleuth {} over {} candidates: {}.",
            self.tool_version,
            self.candidates.len(),
            verdicts.join(", ")
        );
        let _ = writeln!(
            s,
            "\n**Environment.** {}",
            environment_line(&self.environment)
        );
        s
    }
}

fn environment_line(env: &BTreeMap<String, String>) -> String {
    env.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `softmax at train.py:11, output 0: sum 4 → 3, norm 1.5 → 1.5`
pub fn divergence_line(d: &Divergence) -> String {
    let op = d.op();
    let at = op
        .location
        .as_ref()
        .map(|l| format!(" at {}:{}", l.file, l.line))
        .unwrap_or_default();
    let what = match d.difference {
        Difference::Unpaired => match (&d.good, &d.bad) {
            (Some(g), Some(b)) => format!(
                "the runs part here: the good one calls `{}`, the bad one `{}`",
                g.op, b.op
            ),
            (Some(_), None) => {
                "only the good run calls it; every value both runs compute agrees".to_owned()
            }
            _ => "only the bad run calls it; every value both runs compute agrees".to_owned(),
        },
        Difference::Outputs => format!(
            "{} outputs against {}",
            d.bad.as_ref().map_or(0, |b| b.outputs.len()),
            d.good.as_ref().map_or(0, |g| g.outputs.len())
        ),
        _ => {
            let i = d.output.unwrap_or(0);
            let g = d.good.as_ref().and_then(|o| o.outputs.get(i));
            let b = d.bad.as_ref().and_then(|o| o.outputs.get(i));
            match (g, b) {
                (Some(g), Some(b)) => format!(
                    "output {i}: shape {:?} → {:?}, {} → {}, sum {} → {}, norm {} → {}",
                    g.shape,
                    b.shape,
                    g.dtype,
                    b.dtype,
                    num(g.sum),
                    num(b.sum),
                    num(g.norm),
                    num(b.norm)
                ),
                _ => String::new(),
            }
        }
    };
    let direction = if d.difference == Difference::Unpaired {
        ""
    } else {
        " (good → bad)"
    };
    format!("`{}`{at}, {what}{direction}", op.op)
}

fn num(v: f64) -> String {
    if v.is_finite() && v != 0.0 && (v.abs() < 1e-4 || v.abs() >= 1e7) {
        format!("{v:.6e}")
    } else if v.is_finite() {
        format!("{}", (v * 1e8).round() / 1e8)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diverge::first_divergence;
    use gradsleuth_model::capture::{OpDigest, TensorDigest};
    use gradsleuth_model::Location;

    fn report() -> BisectReport {
        let d = |sum| OpDigest {
            op: "softmax".into(),
            location: Some(Location::new("train.py", 11)),
            outputs: vec![TensorDigest {
                shape: vec![2],
                dtype: "torch.float32".into(),
                sum,
                norm: 1.0,
            }],
        };
        let tried = |c: &str, v, e: &str| Tried {
            candidate: c.into(),
            verdict: v,
            evidence: e.into(),
            seconds: 1.0,
            log: None,
            subject: None,
        };
        BisectReport {
            format: BISECT_FORMAT.into(),
            tool_version: "0.1.0".into(),
            over: "release".into(),
            package: Some("torch".into()),
            command: vec!["train.py".into()],
            predicate: Predicate::Finding {
                matches: "GS201".into(),
            },
            predicate_derived: false,
            candidates: vec!["2.1.0".into(), "2.2.0".into(), "2.3.0".into()],
            last_good: Some("2.1.0".into()),
            first_bad: Some("2.2.0".into()),
            undecided: vec![],
            tried: vec![
                tried("2.1.0", Verdict::Good, "no finding matches `GS201`"),
                tried(
                    "2.3.0",
                    Verdict::Bad,
                    "GS201 detach (error): cut at train.py:9",
                ),
                tried(
                    "2.2.0",
                    Verdict::Bad,
                    "GS201 detach (error): cut at train.py:9",
                ),
            ],
            divergence: first_divergence(&[d(1.0)], &[d(0.5)], 1e-6),
            divergence_note: None,
            environment: [("python".to_owned(), "3.11.7".to_owned())].into(),
            notes: vec![],
        }
    }

    #[test]
    fn text_names_the_first_bad_release_its_neighbour_and_the_op() {
        let t = report().text();
        assert!(
            t.contains("First bad: torch 2.2.0 (last good: 2.1.0)"),
            "{t}"
        );
        assert!(t.contains("2.1.0: no finding matches"), "{t}");
        assert!(t.contains("`softmax` at train.py:11, output 0"), "{t}");
        assert!(t.contains("sum 1 → 0.5"), "{t}");
    }

    #[test]
    fn issue_header_is_ready_to_paste() {
        let i = report().issue();
        assert!(
            i.starts_with("### torch 2.2.0 changes this script's behaviour (last good: 2.1.0)"),
            "{i}"
        );
        assert!(
            i.contains("**Problem.** gradsleuth reports a finding matching `GS201`."),
            "{i}"
        );
        assert!(i.contains("**Reproduce.** `python train.py`"), "{i}");
        assert!(i.contains("2.1.0 good, 2.3.0 bad, 2.2.0 bad"), "{i}");
        assert!(i.contains("**Environment.** python 3.11.7"), "{i}");
    }

    #[test]
    fn json_round_trips() {
        let r = report();
        let back: BisectReport = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(back, r);
    }
}
