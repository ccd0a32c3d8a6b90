//! Merging the captures of the ranks of one distributed job into one report
//! (`command: merge`).
//!
//! Captures are folded one at a time ([`Merger::add`]): each is analysed like a single
//! process, then only what the merged report needs is kept (per parameter: the status of each
//! rank, grouped; per module: the number of forward runs on each rank and where it was called;
//! each finding once, with the ranks that produced it; each rank's failure and last phase), so
//! memory grows with parameters × distinct statuses and findings, not with ranks × captures.
//! [`Merger::finish`] then adds what only the merged view shows:
//!
//! * **GS130 `rank_divergence`**: a module that ran on some ranks and not on others (or in
//!   fewer steps on some). DDP reduces every parameter on every rank, so with
//!   `find_unused_parameters=False` the job stops with "Expected to have finished reduction in
//!   the prior iteration..." or hangs, and with `True` its gradient is averaged with the zeros
//!   of the ranks that skipped it. Located at the branch that decided it (the `if` around the
//!   module's call), with the call itself as related. The per-rank "unused" findings it
//!   explains are dropped.
//! * **GS131 rank failure**: a rank that raised (its error, its last observed step and phase),
//!   was stopped by the launcher after another rank failed, left no capture, or was still
//!   running when `--timeout` ended the job (a hang: where it was).

use std::collections::{BTreeMap, BTreeSet};

use gradsleuth_model::report::ReportErrorInfo;
use gradsleuth_model::{
    Capture, Finding, Location, ParamRow, ParamStatus, Related, Report, Severity,
};
use gradsleuth_source::SourceCache;

/// `0-3, 5, 7-9`.
pub fn rank_list(ranks: &BTreeSet<u32>) -> String {
    gradsleuth_model::rank_ranges(&ranks.iter().copied().collect::<Vec<_>>())
}

struct ParamAgg {
    /// The row of the lowest rank seen (shape, optimizer membership, norms).
    row: ParamRow,
    row_rank: u32,
    statuses: BTreeMap<ParamStatus, BTreeSet<u32>>,
}

#[derive(Default)]
struct ModuleAgg {
    /// rank -> (forward runs, root calls on that rank)
    runs: BTreeMap<u32, (u32, u32)>,
    call_site: Option<Location>,
    class: String,
}

/// What the merge keeps of one rank's capture: its analysis, reduced.
pub struct RankDigest {
    rank: u32,
    world_size: u32,
    script: Option<String>,
    argv: Vec<String>,
    environment: gradsleuth_model::capture::Environment,
    rows: Vec<ParamRow>,
    /// (qualified name, class, forward runs, forward calls, first call site)
    modules: Vec<(String, String, u32, u32, Option<Location>)>,
    findings: Vec<Finding>,
    info: RankInfo,
}

impl RankDigest {
    /// Analyses one rank's capture (its rank from `capture.dist`, else `fallback_rank`),
    /// its findings annotated by `annotate` (see [`crate::Annotate`]).
    pub fn of(capture: &Capture, fallback_rank: u32, annotate: crate::Annotate) -> RankDigest {
        let rank = capture.dist.as_ref().map_or(fallback_rank, |d| d.rank);
        let report = crate::analyze_annotated(capture, annotate);
        // An FSDP2 shard with no elements here says nothing about its parameter.
        let empty_shards: BTreeSet<&str> = capture
            .tensors
            .iter()
            .filter(|t| t.local_numel == Some(0))
            .map(|t| t.name.as_str())
            .collect();
        // A forward that raised before reaching the modules (the step the rank failed in) is
        // not a step in which they were skipped.
        let failed_in_forward = capture.error.is_some()
            && capture
                .progress
                .as_ref()
                .is_some_and(|p| p.phase == gradsleuth_model::capture::Phase::Forward);
        let calls = capture
            .root_calls
            .saturating_sub(u32::from(failed_in_forward));
        RankDigest {
            rank,
            world_size: capture.dist.as_ref().map_or(0, |d| d.world_size),
            script: capture.target.script.clone(),
            argv: capture.target.argv.clone(),
            environment: capture.environment.clone(),
            rows: report
                .parameters
                .into_iter()
                .filter(|r| !empty_shards.contains(r.name.as_str()))
                .collect(),
            modules: capture
                .modules
                .iter()
                .filter(|m| m.kind != gradsleuth_model::capture::ModuleKind::Root)
                .map(|m| {
                    (
                        m.name.clone(),
                        m.class.clone(),
                        m.runs.min(calls),
                        calls,
                        m.first_call.clone(),
                    )
                })
                .collect(),
            findings: report.findings,
            info: RankInfo {
                steps: report.steps_observed.unwrap_or(0),
                phase: capture
                    .progress
                    .as_ref()
                    .map(|p| (p.step, p.phase.as_str().to_owned())),
                error: capture
                    .error
                    .as_ref()
                    .map(|e| (e.kind.clone(), e.message.clone(), e.location.clone())),
                hostname: capture.dist.as_ref().and_then(|d| d.hostname.clone()),
            },
        }
    }
}

struct RankInfo {
    steps: u32,
    phase: Option<(u32, String)>,
    error: Option<(String, String, Option<Location>)>,
    hostname: Option<String>,
}

/// A finding's identity across ranks: code, file, line, parameters.
type FindingKey = (String, String, u32, Vec<String>);

/// Folds rank captures into one report.
#[derive(Default)]
pub struct Merger {
    world_size: u32,
    script: Option<String>,
    argv: Vec<String>,
    environment: Option<gradsleuth_model::capture::Environment>,
    params: BTreeMap<String, ParamAgg>,
    param_order: Vec<String>,
    modules: BTreeMap<String, ModuleAgg>,
    /// (code, file, line, params) -> (finding of the lowest rank, ranks)
    findings: BTreeMap<FindingKey, (Finding, BTreeSet<u32>)>,
    ranks: BTreeMap<u32, RankInfo>,
    missing: BTreeMap<u32, String>,
    timed_out: bool,
    /// Applied to each rank's findings (see [`crate::Annotate`]).
    annotate: Option<crate::Annotate>,
}

impl Merger {
    pub fn new(world_size: u32) -> Self {
        Merger {
            world_size,
            ..Default::default()
        }
    }

    /// Each rank's findings annotated by `annotate` before they are merged.
    pub fn annotated(mut self, annotate: crate::Annotate) -> Self {
        self.annotate = Some(annotate);
        self
    }

    /// What [`Merger::add`] applies to each rank's findings.
    pub fn annotate(&self) -> crate::Annotate {
        self.annotate.unwrap_or(|_| {})
    }

    /// The job was ended by `--timeout`: ranks not done were still running.
    pub fn timed_out(&mut self) {
        self.timed_out = true;
    }

    /// A rank that left no capture, and why (as far as the launcher knows).
    pub fn missing(&mut self, rank: u32, why: impl Into<String>) {
        self.missing.insert(rank, why.into());
    }

    /// Ranks seen so far.
    pub fn ranks(&self) -> BTreeSet<u32> {
        self.ranks.keys().copied().collect()
    }

    /// Folds one rank's capture in (its rank from `capture.dist`, else `fallback_rank`).
    pub fn add(&mut self, capture: &Capture, fallback_rank: u32) {
        self.fold(RankDigest::of(capture, fallback_rank, self.annotate()));
    }

    /// Folds in a rank already digested (digests can be made in parallel, see
    /// [`RankDigest::of`]).
    pub fn fold(&mut self, d: RankDigest) {
        let rank = d.rank;
        self.world_size = self.world_size.max(d.world_size).max(rank + 1);
        if self.script.is_none() {
            self.script = d.script;
            self.argv = d.argv;
            self.environment = Some(d.environment);
        }
        for row in d.rows {
            let name = row.name.clone();
            match self.params.get_mut(&name) {
                Some(agg) => {
                    agg.statuses.entry(row.status).or_default().insert(rank);
                    if rank < agg.row_rank {
                        agg.row = row;
                        agg.row_rank = rank;
                    }
                }
                None => {
                    let mut statuses = BTreeMap::new();
                    statuses.insert(row.status, BTreeSet::from([rank]));
                    self.param_order.push(name.clone());
                    self.params.insert(
                        name,
                        ParamAgg {
                            row,
                            row_rank: rank,
                            statuses,
                        },
                    );
                }
            }
        }
        for (name, class, runs, calls, first_call) in d.modules {
            let agg = self.modules.entry(name).or_default();
            agg.runs.insert(rank, (runs, calls));
            if agg.class.is_empty() {
                agg.class = class;
            }
            if agg.call_site.is_none() && runs > 0 {
                agg.call_site = first_call;
            }
        }
        for f in d.findings {
            let loc = f.location.as_ref();
            // A NaN gradient is one event however many parameters each rank saw it in: a
            // sharded model's ranks each measure the parameters they hold elements of.
            let per_event = f.code == "GS140";
            let mut params = if per_event {
                f.steps.iter().map(|s| format!("step {s}")).collect()
            } else {
                f.params.clone()
            };
            params.sort();
            let key = (
                f.code.clone(),
                loc.map(|l| l.file.clone()).unwrap_or_default(),
                loc.map_or(0, |l| l.line),
                params,
            );
            match self.findings.get_mut(&key) {
                Some(entry) => {
                    entry.1.insert(rank);
                    if per_event {
                        let had = entry.0.params.len();
                        for p in &f.params {
                            if !entry.0.params.contains(p) {
                                entry.0.params.push(p.clone());
                            }
                        }
                        let count = format!("({had} parameter(s);");
                        let now = format!("({} parameter(s);", entry.0.params.len());
                        entry.0.message = entry.0.message.replacen(&count, &now, 1);
                    }
                }
                None => {
                    self.findings.insert(key, (f, BTreeSet::from([rank])));
                }
            }
        }
        self.ranks.insert(rank, d.info);
    }

    /// The merged report.
    pub fn finish(self) -> Report {
        let mut source = SourceCache::new();
        let all: BTreeSet<u32> = (0..self.world_size).collect();
        let seen: BTreeSet<u32> = self.ranks.keys().copied().collect();
        let mut report = Report::new("merge");
        report.target.script = self.script.clone();
        report.target.argv = self.argv.clone();
        if let Some(env) = &self.environment {
            report.environment = env.clone();
        }
        report.steps_observed = self.ranks.values().map(|r| r.steps).min();

        // Modules that ran on some ranks and not others (or in fewer steps).
        let mut findings: Vec<Finding> = Vec::new();
        let mut divergent_params: BTreeSet<String> = BTreeSet::new();
        let mut divergence_ids: Vec<usize> = Vec::new();
        // Reported modules with their (ran, idle, fewer) ranks: a submodule that diverges
        // exactly as its parent does is the parent's divergence, not another one.
        let mut reported: Vec<(String, BTreeSet<u32>, BTreeSet<u32>)> = Vec::new();
        for (name, m) in &self.modules {
            let ran: BTreeSet<u32> = m
                .runs
                .iter()
                .filter(|(_, (r, _))| *r > 0)
                .map(|(k, _)| *k)
                .collect();
            let idle: BTreeSet<u32> = m
                .runs
                .iter()
                .filter(|(_, (r, _))| *r == 0)
                .map(|(k, _)| *k)
                .collect();
            let fewer: BTreeSet<u32> = m
                .runs
                .iter()
                .filter(|(_, (r, calls))| *r > 0 && r < calls)
                .map(|(k, _)| *k)
                .collect();
            let always: BTreeSet<u32> = ran.difference(&fewer).copied().collect();
            if ran.is_empty() || (idle.is_empty() && (fewer.is_empty() || always.is_empty())) {
                continue;
            }
            let skipped: BTreeSet<u32> = idle.union(&fewer).copied().collect();
            if reported.iter().any(|(anc, r, s)| {
                name.starts_with(&format!("{anc}.")) && *r == ran && *s == skipped
            }) {
                continue;
            }
            reported.push((name.clone(), ran.clone(), skipped.clone()));
            let prefix = format!("{name}.");
            let params: Vec<String> = self
                .param_order
                .iter()
                .filter(|p| p.starts_with(&prefix))
                .cloned()
                .collect();
            if params.is_empty() {
                continue;
            }
            divergent_params.extend(params.iter().cloned());
            let runs_text = |set: &BTreeSet<u32>| {
                set.iter()
                    .map(|r| {
                        let (n, calls) = m.runs[r];
                        format!("{r}: {n}/{calls}")
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut message = if idle.is_empty() {
                format!(
                    "`{name}` ({}) ran in every step on rank(s) {} but skipped steps on rank(s) {} (runs/forward calls: {})",
                    m.class,
                    rank_list(&always),
                    rank_list(&fewer),
                    runs_text(&ran)
                )
            } else {
                format!(
                    "`{name}` ({}) ran on rank(s) {} and never on rank(s) {}",
                    m.class,
                    rank_list(&ran),
                    rank_list(&idle)
                )
            };
            message.push_str(": DDP reduces its parameters on every rank, so training stops with \"Expected to have finished reduction in the prior iteration\" or hangs (find_unused_parameters=False), or averages its gradient with zeros from the ranks that skipped it (True).");
            let mut f = gradsleuth_rules::registered("GS130").finding(Severity::Error, message);
            let call = m.call_site.clone();
            let branch = call.as_ref().and_then(|c| {
                source
                    .enclosing_branch(&c.file, c.line)
                    .map(|l| source.location(&c.file, l))
            });
            f.location = branch.clone().or_else(|| call.clone());
            if let (Some(_), Some(c)) = (&branch, &call) {
                let mut c = c.clone();
                source.fill_snippet(&mut c);
                f.related.push(Related {
                    location: c,
                    message: format!("`{name}` is called here, inside that branch"),
                });
            }
            f.params = params;
            f.ranks = idle.union(&fewer).copied().collect();
            f.chain = vec![
                format!("the branch decides per rank, from each rank's own data"),
                format!("ranks {}: `{name}` runs, its parameters get gradients", rank_list(&ran)),
                format!(
                    "ranks {}: `{name}` {} ✗ → DDP's reduction for its bucket does not match across ranks",
                    rank_list(&idle.union(&fewer).copied().collect()),
                    if idle.is_empty() { "skips some steps" } else { "never runs" }
                ),
            ];
            let attr = name.rsplit('.').next().unwrap_or(name);
            let example = if attr
                .chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
            {
                format!(
                    " (e.g. when the branch is off, add `0.0 * self.{attr}(h).sum()` to the loss)"
                )
            } else {
                String::new()
            };
            f = f.fix(format!(
                "Make every rank run `{name}` in every step{example}, or pass `find_unused_parameters=True` to DDP and accept that its gradient is averaged over all ranks."
            ));
            divergence_ids.push(findings.len());
            findings.push(f);
        }

        // Per-rank findings, merged; the "unused" ones the divergence explains are dropped.
        for ((code, _, _, params), (mut f, ranks)) in self.findings {
            let explained = matches!(code.as_str(), "GS102" | "GS199")
                && !params.is_empty()
                && params.iter().all(|p| divergent_params.contains(p));
            if explained {
                continue;
            }
            f.ranks = ranks.iter().copied().collect();
            f.id = String::new();
            findings.push(f);
        }

        // Rank failures, hangs, missing captures.
        let divergence_related: Vec<Related> = divergence_ids
            .iter()
            .filter_map(|&i| findings[i].location.clone())
            .map(|location| Related {
                location,
                message: "the module that ran on some ranks only (GS130)".into(),
            })
            .collect();
        let mut root_error: Option<(u32, String, String)> = None;
        let mut secondary_error: Option<(u32, String, String)> = None;
        // A hang: the ranks still running at the timeout (or stopped by it). Those furthest
        // behind are what the others wait for in a collective.
        let hung: Vec<u32> = self
            .ranks
            .iter()
            .filter(|(_, i)| {
                self.timed_out
                    && i.phase.as_ref().is_none_or(|(_, p)| p != "done")
                    && i.error.as_ref().is_none_or(|e| e.0 == "Terminated")
            })
            .map(|(r, _)| *r)
            .collect();
        let position = |r: u32| {
            self.ranks[&r]
                .phase
                .as_ref()
                .map_or((0, 0), |(s, p)| (*s, phase_order(p)))
        };
        let behind_at = hung.iter().map(|&r| position(r)).min();
        let ahead_exists = hung.iter().any(|&r| Some(position(r)) != behind_at);
        // The launcher stops the other ranks when one fails (raised, or died leaving no
        // capture); a rank stopped when none did was signalled from outside the job.
        let others_failed = !self.missing.is_empty()
            || all.len() > self.ranks.len()
            || self
                .ranks
                .values()
                .any(|i| i.error.as_ref().is_some_and(|e| e.0 != "Terminated"));
        for (&rank, info) in &self.ranks {
            let at = phase_text(info.phase.as_ref());
            let host = info
                .hostname
                .as_deref()
                .map(|h| format!(" on {h}"))
                .unwrap_or_default();
            let (severity, message, location) = if hung.contains(&rank) {
                let loc = info.error.as_ref().and_then(|e| e.2.clone());
                if ahead_exists && Some(position(rank)) == behind_at {
                    (
                        Severity::Error,
                        format!("rank {rank}{host} stalled {at} and never reached the next collective: the other ranks waited for it until the timeout ended the job."),
                        loc,
                    )
                } else if ahead_exists {
                    (
                        Severity::Warning,
                        format!("rank {rank}{host} waited {at} (in a collective) for the rank(s) behind it until the timeout ended the job."),
                        loc,
                    )
                } else {
                    (
                        Severity::Error,
                        format!("rank {rank}{host} was still running when the timeout ended the job: last seen {at} (a hang: a collective waiting for a rank that will not join, or a stalled step)."),
                        loc,
                    )
                }
            } else {
                match &info.error {
                    Some((kind, _, loc)) if kind == "Terminated" && others_failed => (
                        Severity::Warning,
                        format!("rank {rank}{host} was stopped by the launcher {at} (another rank failed first)."),
                        loc.clone(),
                    ),
                    Some((kind, _, loc)) if kind == "Terminated" => (
                        Severity::Warning,
                        format!("rank {rank}{host} was stopped {at} by a SIGTERM from outside the job (no rank failed and no --timeout ran out: a scheduler's preemption or time limit, or a kill); the location is where it was then."),
                        loc.clone(),
                    ),
                    Some((kind, msg, loc)) if is_secondary(msg) => {
                        if secondary_error.is_none() {
                            secondary_error = Some((rank, kind.clone(), msg.clone()));
                        }
                        (
                            Severity::Warning,
                            format!(
                                "rank {rank}{host} failed {at} because another rank left the job: {kind}: {}",
                                first_line(msg)
                            ),
                            loc.clone(),
                        )
                    }
                    Some((kind, msg, loc)) => {
                        if root_error.is_none() {
                            root_error = Some((rank, kind.clone(), msg.clone()));
                        }
                        (
                            Severity::Error,
                            format!("rank {rank}{host} failed {at}: {kind}: {}", first_line(msg)),
                            loc.clone(),
                        )
                    }
                    None => continue,
                }
            };
            let mut f = gradsleuth_rules::registered("GS131").finding(severity, message);
            f.location = location;
            f.ranks = vec![rank];
            if severity == Severity::Error {
                // A failure or a hang in a job where ranks ran different modules: that is the
                // usual cause, so point at it.
                f.related.extend(divergence_related.iter().cloned());
            }
            findings.push(f);
        }
        let missing: BTreeSet<u32> = all
            .difference(&seen)
            .copied()
            .chain(self.missing.keys().copied())
            .collect();
        for rank in missing {
            let why = self.missing.get(&rank).cloned().unwrap_or_else(|| {
                "it ended before gradsleuth's tracer started, or was killed".into()
            });
            let mut f = gradsleuth_rules::registered("GS131").finding(
                Severity::Error,
                format!("rank {rank} left no capture: {why}."),
            );
            f.ranks = vec![rank];
            findings.push(f);
        }

        // Steps observed per rank (a rank that fell behind or stopped early shows here).
        let mut by_steps: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for (&rank, info) in &self.ranks {
            by_steps.entry(info.steps).or_default().insert(rank);
        }
        if !by_steps.is_empty() {
            let text: Vec<String> = by_steps
                .iter()
                .map(|(steps, ranks)| {
                    let word = if ranks.len() == 1 { "rank" } else { "ranks" };
                    format!("{word} {}: {steps}", rank_list(ranks))
                })
                .collect();
            let mut f = gradsleuth_rules::registered("GS132").finding(
                Severity::Info,
                format!(
                    "steps observed per rank: {}{}",
                    text.join("; "),
                    if by_steps.len() > 1 {
                        " (the ranks did not get equally far)"
                    } else {
                        ""
                    }
                ),
            );
            f.ranks = self.ranks.keys().copied().collect();
            findings.push(f);
        }
        // Parameters: one row each; `ranks` when the ranks disagree.
        for name in &self.param_order {
            let agg = &self.params[name];
            let mut row = agg.row.clone();
            if agg.statuses.len() > 1 {
                // The merged status is the one that is not learning (what needs fixing).
                row.status = agg
                    .statuses
                    .keys()
                    .copied()
                    .find(|s| *s != ParamStatus::Learning)
                    .unwrap_or(row.status);
                let mut map = serde_json::Map::new();
                for (status, ranks) in &agg.statuses {
                    for r in ranks {
                        map.insert(r.to_string(), serde_json::Value::from(status.as_str()));
                    }
                }
                row.ranks = Some(map);
            }
            report.parameters.push(row);
        }
        report.push_findings(findings);
        if root_error.is_none() && secondary_error.is_none() && self.timed_out {
            let stalled = report
                .findings
                .iter()
                .filter(|f| f.code == "GS131" && f.severity == Severity::Error)
                .map(|f| f.id.clone())
                .collect();
            report.error = Some(ReportErrorInfo {
                kind: "Timeout".into(),
                message:
                    "the job did not finish before --timeout; gradsleuth ended every process of it"
                        .into(),
                explained_by: stalled,
                explanation: None,
            });
        }
        if let Some((rank, kind, message)) = root_error.or(secondary_error) {
            let explained_by = crate::explaining(&report.findings, &message);
            let explanation = gradsleuth_explain::explain_exception(&kind, &message);
            report.error = Some(ReportErrorInfo {
                kind,
                message: format!("[rank {rank}] {message}"),
                explained_by,
                explanation,
            });
        }
        report
    }
}

/// Where in a step a phase is: later phases are further along.
fn phase_order(phase: &str) -> u32 {
    match phase {
        "forward" => 1,
        "backward" => 2,
        "step" => 3,
        "done" => 4,
        _ => 0,
    }
}

/// Where a process was last seen: "after the optimizer step of step 2", "in the backward of
/// step 3", "before its first step".
pub fn phase_text(phase: Option<&(u32, String)>) -> String {
    match phase {
        Some((step, p)) if p == "done" => format!("after the {step} observed step(s)"),
        Some((step, p)) if p == "step" => format!("after the optimizer step of step {step}"),
        Some((step, p)) => format!("in the {p} of step {step}"),
        None => "before its first step".to_owned(),
    }
}

/// An error a rank gets because another rank died (its connection closed under it).
fn is_secondary(message: &str) -> bool {
    [
        "Connection closed by peer",
        "Connection reset by peer",
        "remote worker crashing",
        "Broken pipe",
    ]
    .iter()
    .any(|s| message.contains(s))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// Merges rank captures (already loaded) into one report.
pub fn merge(captures: &[Capture]) -> Report {
    let mut m = Merger::new(0);
    for (i, c) in captures.iter().enumerate() {
        m.add(c, i as u32);
    }
    m.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::testing::healthy;
    use gradsleuth_model::capture::{DistInfo, ModuleKind, Progress, ScriptError};

    /// Rank `rank` of `world` training `Net` (fc + aux) for 3 steps; aux runs `aux_runs` times.
    fn rank_capture(rank: u32, world: u32, aux_runs: u32) -> Capture {
        let mut s = healthy(3);
        s.module(
            3,
            "Linear",
            "aux",
            Some(1),
            ModuleKind::Registered,
            aux_runs,
        );
        s.param(12, "aux.weight", 3);
        s.capture.optimizers[0].params.push(12);
        for st in &mut s.capture.steps {
            st.grad_norms.push((12, (aux_runs > 0).then_some(0.3)));
            st.weight_before.push((12, 1.0));
            st.weight_after
                .push((12, if aux_runs > 0 { 1.1 } else { 1.0 }));
        }
        s.capture.dist = Some(DistInfo {
            rank,
            world_size: world,
            local_rank: Some(rank),
            hostname: None,
        });
        s.capture
    }

    /// A sharded model (FSDP): rank 1 holds no elements of `aux.weight`, so its gradient and
    /// update are rank 0's to judge; but a cut both ranks' backwards saw cut it off, and no
    /// gradient reached it on either. Both ranks name it: one finding for ranks 0-1, not one
    /// per rank with different parameters.
    #[test]
    fn a_cut_off_parameter_a_rank_holds_no_elements_of_is_still_named_by_that_rank() {
        let cut = gradsleuth_model::capture::CutRec {
            kind: gradsleuth_model::Category::Detach,
            op: "Tensor.detach".into(),
            location: Some(Location::new("train.py", 22)),
            params: vec![12],
            step: 1,
            ..Default::default()
        };
        let ranks: Vec<Capture> = (0..2)
            .map(|rank| {
                let mut c = rank_capture(rank, 2, 3);
                for st in &mut c.steps {
                    st.grad_norms.retain(|(k, _)| *k != 12);
                    st.weight_after.retain(|(k, _)| *k != 12);
                    st.weight_before.retain(|(k, _)| *k != 12);
                }
                for b in &mut c.backwards {
                    b.reached.retain(|k| *k != 12);
                }
                if rank == 1 {
                    let t = c.tensors.iter_mut().find(|t| t.key == 12).unwrap();
                    t.local_numel = Some(0);
                }
                c.cuts.push(cut.clone());
                c
            })
            .collect();
        let report = merge(&ranks);
        let loud: Vec<&Finding> = report
            .findings
            .iter()
            .filter(|f| f.severity != Severity::Info)
            .collect();
        assert_eq!(loud.len(), 1, "{:#?}", report.findings);
        assert_eq!(loud[0].params, vec!["aux.weight"]);
        assert_eq!(loud[0].ranks, vec![0, 1]);
        // Without the cut, a rank with no elements says nothing: rank 0's view stands.
        let quiet: Vec<Capture> = (0..2)
            .map(|rank| {
                let mut c = rank_capture(rank, 2, 3);
                if rank == 1 {
                    let t = c.tensors.iter_mut().find(|t| t.key == 12).unwrap();
                    t.local_numel = Some(0);
                    for st in &mut c.steps {
                        st.grad_norms.retain(|(k, _)| *k != 12);
                    }
                }
                c
            })
            .collect();
        let report = merge(&quiet);
        assert!(
            report.findings.iter().all(|f| f.severity == Severity::Info),
            "{:#?}",
            report.findings
        );
    }

    #[test]
    fn ranks_print_as_ranges() {
        assert_eq!(
            rank_list(&BTreeSet::from([0, 1, 2, 5, 7, 8])),
            "0-2, 5, 7-8"
        );
        assert_eq!(rank_list(&BTreeSet::new()), "");
    }

    #[test]
    fn a_module_skipped_on_some_ranks_is_one_divergence_finding() {
        let report = merge(&[
            rank_capture(0, 3, 3),
            rank_capture(1, 3, 0),
            rank_capture(2, 3, 3),
        ]);
        assert_eq!(report.command, "merge");
        let div: Vec<&Finding> = report
            .findings
            .iter()
            .filter(|f| f.code == "GS130")
            .collect();
        assert_eq!(div.len(), 1, "{:#?}", report.findings);
        assert_eq!(div[0].ranks, vec![1]);
        assert_eq!(div[0].params, vec!["aux.weight"]);
        assert!(div[0]
            .message
            .contains("ran on rank(s) 0, 2 and never on rank(s) 1"));
        // Rank 1's own "never ran" finding is what the divergence explains: not repeated.
        assert!(
            report.findings.iter().all(|f| f.code != "GS102"),
            "{:#?}",
            report.findings
        );
        let row = report
            .parameters
            .iter()
            .find(|p| p.name == "aux.weight")
            .unwrap();
        let ranks = row.ranks.as_ref().expect("ranks disagree");
        assert_eq!(ranks["1"], "grad_none");
        assert_eq!(ranks["0"], "learning");
    }

    #[test]
    fn the_failing_rank_is_the_root_cause_not_the_one_whose_peer_left() {
        let mut r0 = rank_capture(0, 2, 3);
        r0.error = Some(ScriptError {
            kind: "RuntimeError".into(),
            message: "[pair.cc:561] Connection closed by peer [127.0.0.1]:5000".into(),
            location: None,
            ..Default::default()
        });
        r0.progress = Some(Progress {
            step: 2,
            phase: gradsleuth_model::capture::Phase::Backward,
        });
        let mut r1 = rank_capture(1, 2, 0);
        r1.error = Some(ScriptError {
            kind: "RuntimeError".into(),
            message: "Expected to have finished reduction in the prior iteration before starting a new one.".into(),
            location: Some(Location::new("train.py", 43)),
            ..Default::default()
        });
        r1.progress = Some(Progress {
            step: 3,
            phase: gradsleuth_model::capture::Phase::Forward,
        });
        let report = merge(&[r0, r1]);
        let err = report.error.as_ref().unwrap();
        assert!(err
            .message
            .starts_with("[rank 1] Expected to have finished reduction"));
        let div = report.findings.iter().find(|f| f.code == "GS130").unwrap();
        assert_eq!(err.explained_by, vec![div.id.clone()]);
        let fails: Vec<(&Severity, &Vec<u32>)> = report
            .findings
            .iter()
            .filter(|f| f.code == "GS131")
            .map(|f| (&f.severity, &f.ranks))
            .collect();
        assert_eq!(
            fails,
            vec![(&Severity::Error, &vec![1]), (&Severity::Warning, &vec![0])]
        );
    }

    #[test]
    fn a_rank_stopped_when_no_rank_failed_is_told_it_was_signalled_from_outside() {
        let stopped = |rank| {
            let mut c = rank_capture(rank, 2, 3);
            c.error = Some(ScriptError {
                kind: "Terminated".into(),
                message: "terminated by signal 15".into(),
                location: Some(Location::new("train.py", 12)),
                ..Default::default()
            });
            c
        };
        let messages = |report: &Report| -> Vec<String> {
            report
                .findings
                .iter()
                .filter(|f| f.code == "GS131")
                .map(|f| f.message.clone())
                .collect()
        };
        let outside = messages(&merge(&[stopped(0), stopped(1)]));
        assert_eq!(outside.len(), 2);
        assert!(outside
            .iter()
            .all(|m| m.contains("from outside the job") && !m.contains("another rank failed")));
        // A peer that raised, or died leaving no capture: the launcher stopped the rest.
        let mut failed = rank_capture(1, 2, 3);
        failed.error = Some(ScriptError {
            kind: "RuntimeError".into(),
            message: "boom".into(),
            ..Default::default()
        });
        for report in [merge(&[stopped(0), failed]), merge(&[stopped(0)])] {
            let stopped = messages(&report)
                .into_iter()
                .find(|m| m.starts_with("rank 0"))
                .unwrap();
            assert!(stopped.contains("another rank failed first"), "{stopped}");
        }
    }

    #[test]
    fn a_hang_names_the_rank_that_is_behind() {
        let mut m = Merger::new(3);
        use gradsleuth_model::capture::Phase;
        for (rank, step, phase) in [
            (0, 2, Phase::Forward),
            (1, 1, Phase::Step),
            (2, 2, Phase::Backward),
        ] {
            let mut c = rank_capture(rank, 3, 3);
            c.progress = Some(Progress { step, phase });
            m.add(&c, rank);
        }
        m.timed_out();
        let report = m.finish();
        let by_rank: Vec<(Vec<u32>, Severity)> = report
            .findings
            .iter()
            .filter(|f| f.code == "GS131")
            .map(|f| (f.ranks.clone(), f.severity))
            .collect();
        assert!(by_rank.contains(&(vec![1], Severity::Error)), "{by_rank:?}");
        assert!(by_rank.contains(&(vec![0], Severity::Warning)));
        assert!(by_rank.contains(&(vec![2], Severity::Warning)));
        let stalled = report.findings.iter().find(|f| f.ranks == vec![1]).unwrap();
        assert!(stalled
            .message
            .contains("stalled after the optimizer step of step 1"));
        assert_eq!(report.error.as_ref().unwrap().kind, "Timeout");
    }

    #[test]
    fn a_rank_without_capture_is_reported() {
        let mut m = Merger::new(3);
        m.add(&rank_capture(0, 3, 3), 0);
        m.add(&rank_capture(2, 3, 3), 2);
        let report = m.finish();
        let missing: Vec<&Finding> = report
            .findings
            .iter()
            .filter(|f| f.code == "GS131")
            .collect();
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].ranks, vec![1]);
        assert!(missing[0].message.starts_with("rank 1 left no capture"));
    }
}
