//! Analysis: a [`Capture`] in, a [`Report`] out.
//!
//! First [`facts`] derives, per tracked tensor, what happened to it over the observed steps
//! (reached by a backward? gradient norms, changed by a step? held by which optimizer?) and
//! its [`ParamStatus`]. Then each check in [`checks`] (one file per check, each with its code,
//! its documentation and its tests) looks at the facts and emits [`Finding`]s, claiming the
//! parameters it explains. Checks run from the most specific to the catch-all, so that every
//! parameter that does not learn is explained exactly once and never silently.

pub mod checks;
pub mod facts;
pub mod merge;

use gradsleuth_model::report::ReportErrorInfo;
use gradsleuth_model::{Capture, Finding, Report};
use gradsleuth_source::SourceCache;

pub use facts::Facts;

/// Shared state of one analysis.
pub struct Context<'a> {
    pub capture: &'a Capture,
    pub facts: Facts,
    pub source: std::cell::RefCell<SourceCache>,
    claimed: std::cell::RefCell<std::collections::HashSet<u64>>,
    /// Claimed by op-level cut findings: one parameter may sit behind several cuts.
    cut_claimed: std::cell::RefCell<std::collections::HashSet<u64>>,
}

impl<'a> Context<'a> {
    pub fn new(capture: &'a Capture) -> Self {
        let mut source = SourceCache::new();
        let facts = Facts::derive_with(capture, &mut source);
        Context {
            capture,
            facts,
            source: std::cell::RefCell::new(source),
            claimed: Default::default(),
            cut_claimed: Default::default(),
        }
    }

    /// Marks tensors as explained by a finding.
    pub fn claim(&self, keys: impl IntoIterator<Item = u64>) {
        self.claimed.borrow_mut().extend(keys);
    }

    pub fn is_claimed(&self, key: u64) -> bool {
        self.claimed.borrow().contains(&key) || self.cut_claimed.borrow().contains(&key)
    }

    /// Claimed by a finding other than an op-level cut.
    pub fn is_claimed_before_cuts(&self, key: u64) -> bool {
        self.claimed.borrow().contains(&key)
    }

    pub fn claim_by_cut(&self, keys: impl IntoIterator<Item = u64>) {
        self.cut_claimed.borrow_mut().extend(keys);
    }

    /// A location with its snippet filled in.
    pub fn locate(
        &self,
        loc: Option<&gradsleuth_model::Location>,
    ) -> Option<gradsleuth_model::Location> {
        let mut l = loc?.clone();
        self.source.borrow_mut().fill_snippet(&mut l);
        Some(l)
    }
}

/// What a caller adds to the findings before they are numbered (the CLI and `_core` add
/// `gradsleuth lint`'s cross-references); the analysis itself reads nothing but the capture.
pub type Annotate = fn(&mut [Finding]);

/// Runs every check and assembles the report: a pure function of the capture.
pub fn analyze(capture: &Capture) -> Report {
    analyze_annotated(capture, |_| {})
}

/// [`analyze`], with `annotate` applied to the findings before they are numbered.
pub fn analyze_annotated(capture: &Capture, annotate: Annotate) -> Report {
    let ctx = Context::new(capture);
    let mut findings: Vec<Finding> = Vec::new();
    for check in checks::ALL {
        findings.extend((check.run)(&ctx));
    }
    annotate(&mut findings);
    let mut report = Report::new(&capture.command);
    report.target = capture.target.clone();
    report.environment = capture.environment.clone();
    report.steps_observed = Some(ctx.facts.steps_observed);
    report.observation = gradsleuth_model::report::ObservationCost::of(&capture.step_seconds);
    report.parameters = ctx.facts.rows();
    if let Some(w) = &capture.watch {
        report.steps_observed = Some(report.steps_observed.unwrap_or(0).max(w.steps as u32));
        if report.parameters.is_empty() {
            report.parameters = watch_rows(w);
        } else {
            // The first steps looked fine; the whole run decides the status.
            let later: std::collections::HashMap<&str, gradsleuth_model::ParamStatus> =
                watch_rows(w)
                    .into_iter()
                    .filter(|r| r.status != gradsleuth_model::ParamStatus::Learning)
                    .map(|r| {
                        (
                            w.params
                                .iter()
                                .find(|p| p.name == r.name)
                                .map_or("", |p| p.name.as_str()),
                            r.status,
                        )
                    })
                    .collect();
            for row in &mut report.parameters {
                if let Some(s) = later.get(row.name.as_str()) {
                    row.status = *s;
                }
            }
        }
    }
    report.push_findings(findings);
    if let Some(err) = &capture.error {
        let explained_by = explaining(&report.findings, &err.message);
        report.error = Some(ReportErrorInfo {
            kind: err.kind.clone(),
            message: err.message.clone(),
            explained_by,
            explanation: explanation_of(err),
        });
    }
    report
}

/// The script's error explained where it was raised (its traceback's files), with the holder
/// of an object that could not be serialised, when the tracer found it, as the first cause.
fn explanation_of(
    err: &gradsleuth_model::capture::ScriptError,
) -> Option<gradsleuth_model::Explanation> {
    let mut e = gradsleuth_explain::explain_raised(&err.kind, &err.message, &err.frames)?;
    if let Some(holder) = &err.holder {
        e.causes
            .insert(0, format!("It is reached through `{holder}`."));
        e.fields.insert("holder".into(), holder.clone());
    }
    Some(e)
}

/// Parameter rows from a watch record alone (`gradsleuth.watch` without the first-steps
/// tracer): the status over the whole run.
fn watch_rows(w: &gradsleuth_model::capture::WatchRec) -> Vec<gradsleuth_model::ParamRow> {
    use gradsleuth_model::ParamStatus as S;
    w.params
        .iter()
        .map(|p| {
            let g = &p.grad_norm;
            let stopped = w.events.iter().any(|e| {
                e.kind == gradsleuth_model::capture::WatchEventKind::Stopped
                    && e.names.contains(&p.name)
            });
            let status = if p.first_nonfinite_step.is_some() {
                S::Nan
            } else if g.count > 0 && g.none == g.count || stopped {
                S::GradNone
            } else if g.count > 0 && g.zero == g.count - g.none {
                S::GradZero
            } else {
                S::Learning
            };
            gradsleuth_model::ParamRow {
                name: p.name.clone(),
                shape: Vec::new(),
                status,
                in_optimizer: Some(true),
                grad_norm: Vec::new(),
                update_norm: Vec::new(),
                ranks: None,
            }
        })
        .collect()
}

/// The findings that explain the script's exception, by what the message says.
pub(crate) fn explaining(findings: &[Finding], message: &str) -> Vec<String> {
    use gradsleuth_model::Category as C;
    let cut_or = |more: &[C]| -> Vec<C> { C::CUTS.iter().chain(more).copied().collect() };
    let wanted: Vec<C> = if message.contains("backward through the graph a second time") {
        vec![C::StaleTensor]
    } else if message.contains("modified by an inplace operation") {
        vec![C::InplaceSaved]
    } else if message.contains("leaf Variable that requires grad") {
        vec![C::InplaceLeaf]
    } else if message.contains("does not require grad and does not have a grad_fn") {
        cut_or(&[C::Frozen])
    } else if message.contains("Expected to have finished reduction") {
        // DDP waited for gradients of parameters that took no part in the loss: whatever cut
        // them off, left their module unused, or ran it on some ranks only.
        cut_or(&[C::RankDivergence, C::Unused])
    } else {
        Vec::new()
    };
    findings
        .iter()
        .filter(|f| wanted.contains(&f.category))
        .map(|f| f.id.clone())
        .collect()
}
