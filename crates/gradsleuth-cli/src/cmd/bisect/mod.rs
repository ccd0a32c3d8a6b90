//! `gradsleuth bisect`: which release of a package (or which commit of the user's repository)
//! changed what a training script does.
//!
//! Releases: each candidate is installed once into its own overlay folder (`uv pip install
//! --target`, hard-linked from uv's cache; pip when uv is absent), constrained to the versions
//! the rest of the environment has, and put first on `PYTHONPATH` of a `gradsleuth run
//! --probe` of the script's first steps: everything else is the user's environment as it is.
//! Overlays are kept under `~/.cache/gradsleuth/bisect`, so a second bisect pays no install.
//!
//! Commits: the repository is cloned into a temporary folder (the user's checkout is never
//! touched) and `git bisect run` drives the search there, calling the hidden `bisect-step`
//! subcommand at each commit.
//!
//! The search, the predicates, the diverging op and the report are `gradsleuth-bisect`'s; this
//! module installs, runs and collects.

mod git;
mod install;
mod runner;

use std::path::{Path, PathBuf};

use gradsleuth_bisect::predicate::{derive, Observation, Predicate};
use gradsleuth_bisect::report::{BisectReport, Tried, BISECT_FORMAT};
use gradsleuth_bisect::version::{between, Version};
use gradsleuth_bisect::{first_divergence, Search, Verdict};
use gradsleuth_model::Capture;
use serde::{Deserialize, Serialize};

use crate::CliError;
use git::git_bisect;
use install::Installer;
use runner::{base_python, io, Run, Runner};

pub use git::step;

#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum BisectFormat {
    Text,
    Json,
    /// The header of an issue to paste (Markdown).
    Issue,
}

/// How a run is judged; at most one of these (none: the difference between the two ends).
#[derive(clap::Args, Debug, Clone, Default, Serialize, Deserialize)]
#[group(multiple = false)]
pub struct PredicateArgs {
    /// Bad when a finding matches: a code (GS201), a category (detach) or a parameter name.
    #[arg(long, value_name = "CODE|CATEGORY|PARAM")]
    pub finding: Option<String>,
    /// Bad when the script raises an error whose `Type: message` contains TEXT.
    #[arg(long, value_name = "TEXT")]
    pub raises: Option<String>,
    /// Bad when the loss after STEP (default: the last observed) differs from the good end's
    /// by more than --loss-tol.
    #[arg(long, value_name = "STEP", num_args = 0..=1, default_missing_value = "0")]
    pub loss: Option<u32>,
    /// Bad when COMMAND (run by the shell, in the candidate's environment) exits non-zero;
    /// exit code 125 means "cannot tell", as for `git bisect run`.
    #[arg(long = "cmd", id = "cmd", value_name = "COMMAND")]
    pub shell: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
#[command(trailing_var_arg = true)]
pub struct BisectArgs {
    /// A release where the script behaves as it should. Without it, older releases are tried
    /// (1, 2, 4, ... back from the bad one) until one does.
    #[arg(long, value_name = "VERSION")]
    pub good: Option<String>,
    /// A release where it does not [default: the one installed].
    #[arg(long, value_name = "VERSION")]
    pub bad: Option<String>,
    /// The package whose releases are searched.
    #[arg(long, default_value = "torch", value_name = "NAME")]
    pub package: String,
    /// The candidate releases, instead of every release the package index lists between the
    /// two ends (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "V1,V2,...")]
    pub versions: Vec<String>,
    /// Search the commits of the script's git repository from GOOD to BAD instead, with `git
    /// bisect run` in a temporary clone (your checkout is not touched).
    #[arg(long, num_args = 2, value_names = ["GOOD", "BAD"], conflicts_with_all = ["good", "bad", "versions"])]
    pub git: Option<Vec<String>>,
    #[command(flatten)]
    pub predicate: PredicateArgs,
    /// Relative tolerance of --loss (and of the diverging op's values).
    #[arg(long, value_name = "REL", default_value_t = 1e-4)]
    pub loss_tol: f64,
    /// Training steps each run observes (then the run ends).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub steps: u32,
    /// The Python environment to start from [default: the one gradsleuth runs in].
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// End a run after SECONDS (the candidate then counts as cannot-tell).
    #[arg(long, value_name = "SECONDS", default_value_t = 900.0)]
    pub timeout: f64,
    #[arg(long, value_enum, default_value_t = BisectFormat::Text)]
    pub format: BisectFormat,
    /// Write the report to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Keep every run's output, report and capture in DIR.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// The script and its arguments.
    #[arg(value_name = "SCRIPT [ARGS]...", allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// What `git bisect run` calls at each commit (hidden): runs the script in the checkout,
/// judges it, records the run, exits 0 good, 1 bad, 125 cannot tell.
#[derive(clap::Args, Debug, Clone)]
pub struct StepArgs {
    /// The step's configuration, written by `gradsleuth bisect --git`.
    pub config: PathBuf,
}

/// A run's verdict: the predicate's, or cannot-tell when the run itself broke.
fn judge(p: &Predicate, run: &Run, reference: Option<&Observation>) -> (Verdict, String) {
    if let Some(why) = &run.broken {
        return (Verdict::Skip, format!("could not run: {why}"));
    }
    p.judge(&run.observation, reference)
}

/// The user's predicate, if they named one.
fn chosen(args: &PredicateArgs, rel_tol: f64) -> Option<Predicate> {
    if let Some(m) = &args.finding {
        return Some(Predicate::Finding { matches: m.clone() });
    }
    if let Some(t) = &args.raises {
        return Some(Predicate::Raises { text: t.clone() });
    }
    if let Some(step) = args.loss {
        return Some(Predicate::Loss { step, rel_tol });
    }
    args.shell
        .as_ref()
        .map(|c| Predicate::Exit { command: c.clone() })
}

/// The report's environment: the machine as the base interpreter sees it, and `extra`.
fn environment(
    python: &Path,
    extra: &[(&str, String)],
) -> std::collections::BTreeMap<String, String> {
    let mut env: std::collections::BTreeMap<String, String> = super::environment(python)
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            // The candidates' torch is in each run's evidence; this is the environment's own.
            "torch" => ("torch (this environment)".to_owned(), v),
            _ => (k, v),
        })
        .collect();
    for (k, v) in extra {
        env.insert((*k).to_owned(), v.clone());
    }
    env
}

fn progress(label: &str, verdict: Verdict, evidence: &str, seconds: f64) {
    eprintln!(
        "gradsleuth bisect: {label}: {} ({evidence}) [{seconds:.1} s]",
        verdict.as_str()
    );
}

fn check_command(args: &BisectArgs) -> Result<(), CliError> {
    match args.command.first() {
        None if args.predicate.shell.is_none() => Err(CliError::Usage(
            "nothing to run: gradsleuth bisect [--good V] [--bad V] -- train.py [ARGS...] (or --cmd COMMAND)".into(),
        )),
        Some(s) if s.ends_with(".py") && args.git.is_none() && !Path::new(s).is_file() => {
            Err(CliError::Usage(format!("no such script: {s}")))
        }
        _ => Ok(()),
    }
}

pub fn run(args: BisectArgs) -> Result<i32, CliError> {
    check_command(&args)?;
    let (work, _guard) = match &args.keep {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(io("cannot create --keep's folder"))?;
            (std::path::absolute(d).unwrap_or_else(|_| d.clone()), None)
        }
        None => {
            let t = tempfile::tempdir().map_err(io("cannot create a temporary directory"))?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let report = match &args.git {
        Some(range) => git_bisect(&args, &range[0], &range[1], &work)?,
        None => release_bisect(&args, &work)?,
    };
    let text = match args.format {
        BisectFormat::Text => report.text(),
        BisectFormat::Json => report.json(),
        BisectFormat::Issue => report.issue(),
    };
    match &args.out {
        Some(p) => std::fs::write(p, text)
            .map_err(|e| CliError::Io(format!("cannot write {}: {e}", p.display())))?,
        None => print!("{text}"),
    }
    Ok(i32::from(report.first_bad.is_none()))
}

/// The two ends judged, and the predicate (the user's, or the ends' difference).
fn settle_predicate(
    args: &BisectArgs,
    good: (&str, &Run),
    bad: (&str, &Run),
) -> Result<(Predicate, bool), CliError> {
    let (predicate, derived) = match chosen(&args.predicate, args.loss_tol) {
        Some(p) => (p, false),
        None => {
            for (label, run) in [good, bad] {
                if let Some(why) = &run.broken {
                    return Err(CliError::Usage(format!(
                        "{label} could not be run: {why} (see {})",
                        run.log.display()
                    )));
                }
            }
            match derive(&good.1.observation, &bad.1.observation, args.loss_tol) {
                Some(p) => (p, true),
                None => {
                    return Err(CliError::Usage(format!(
                        "{} and {} behave the same (the same error, findings and losses): name what is bad with --finding, --raises, --loss or --cmd",
                        good.0, bad.0
                    )))
                }
            }
        }
    };
    let (gv, ge) = judge(&predicate, good.1, Some(&good.1.observation));
    let (bv, be) = judge(&predicate, bad.1, Some(&good.1.observation));
    if gv != Verdict::Good {
        return Err(CliError::Usage(format!(
            "the good end {} is not good by the predicate ({}): {ge}",
            good.0,
            predicate.describe()
        )));
    }
    if bv != Verdict::Bad {
        return Err(CliError::Usage(format!(
            "the bad end {} is not bad by the predicate ({}): {be}",
            bad.0,
            predicate.describe()
        )));
    }
    Ok((predicate, derived))
}

/// The releases run so far, each once.
struct Releases<'a> {
    installer: &'a Installer,
    runner: &'a Runner,
    package: &'a str,
    runs: std::collections::HashMap<String, Run>,
}

impl Releases<'_> {
    /// Installs and runs `v` unless it was already.
    fn ensure(&mut self, v: &Version) -> Result<(), CliError> {
        let label = v.to_string();
        if self.runs.contains_key(&label) {
            return Ok(());
        }
        eprintln!(
            "gradsleuth bisect: {} {label}: installing and running...",
            self.package
        );
        let run = match self.installer.overlay(&label) {
            Ok((dir, own)) => {
                let mut r = self.runner.run(&label, Some(&dir), None)?;
                r.own_dependencies = own;
                r
            }
            Err(why) => Run {
                own_dependencies: false,
                observation: Observation::default(),
                capture: None,
                broken: Some(why),
                log: self.runner.work.join("none"),
                seconds: 0.0,
            },
        };
        self.runs.insert(label, run);
        Ok(())
    }

    fn get(&self, v: &Version) -> &Run {
        &self.runs[&v.to_string()]
    }
}

impl Runner {
    /// The runner of a bisect: its script, test command, steps, limits; runs go under `work`.
    fn of(args: &BisectArgs, work: PathBuf) -> Runner {
        Runner {
            command: args.command.clone(),
            shell: args.predicate.shell.clone(),
            steps: args.steps,
            timeout: args.timeout,
            python: args.python.clone(),
            work,
        }
    }
}

fn release_bisect(args: &BisectArgs, work: &Path) -> Result<BisectReport, CliError> {
    let python = base_python(args.python.as_ref());
    let installer = Installer::new(&python, &args.package, work)?;
    let runner = Runner::of(args, work.to_path_buf());
    let parse = |v: &str| {
        Version::parse(v).ok_or_else(|| CliError::Usage(format!("not a release version: {v}")))
    };
    let bad_text = match &args.bad {
        Some(b) => b.clone(),
        None => installer.installed().ok_or_else(|| {
            CliError::Usage(format!(
                "{} is not installed in {}: give --bad VERSION",
                args.package,
                python.display()
            ))
        })?,
    };
    let bad = parse(&bad_text)?;
    let listed = if args.versions.is_empty() {
        installer.listed()?
    } else {
        args.versions.clone()
    };
    let mut tried: Vec<Tried> = Vec::new();
    let mut runs = Releases {
        installer: &installer,
        runner: &runner,
        package: &args.package,
        runs: Default::default(),
    };
    // The ends, then the predicate.
    let good = match &args.good {
        Some(g) => {
            let g = parse(g)?;
            if g == bad {
                return Err(CliError::Usage(
                    "--good and --bad are the same release".into(),
                ));
            }
            runs.ensure(&g)?;
            runs.ensure(&bad)?;
            g
        }
        None if args.predicate.loss.is_some() => {
            return Err(CliError::Usage(
                "--loss compares each release with the good end's loss: give --good VERSION".into(),
            ))
        }
        None => {
            // Back from the bad end until a release is good.
            runs.ensure(&bad)?;
            let mut older: Vec<Version> = listed
                .iter()
                .filter_map(|s| Version::parse(s))
                .filter(|v| v < &bad && !v.is_prerelease())
                .collect();
            older.sort();
            older.dedup();
            older.push(bad.clone());
            let user = chosen(&args.predicate, args.loss_tol);
            let mut found = None;
            for i in gradsleuth_bisect::search::backwards(older.len() - 1) {
                let v = older[i].clone();
                runs.ensure(&v)?;
                let run = runs.get(&v);
                let verdict = match &user {
                    // No reference yet: --loss was refused above, the rest need none.
                    Some(p) => judge(p, run, None).0,
                    None if run.broken.is_some() => Verdict::Skip,
                    None => {
                        match derive(&run.observation, &runs.get(&bad).observation, args.loss_tol) {
                            Some(_) => Verdict::Good,
                            None => Verdict::Bad,
                        }
                    }
                };
                progress(
                    &v.to_string(),
                    verdict,
                    "looking for a good start",
                    run.seconds,
                );
                if verdict == Verdict::Good {
                    found = Some(v);
                    break;
                }
            }
            found.ok_or_else(|| {
                CliError::Usage(format!(
                    "no older release of {} behaves differently from {bad}: give --good VERSION",
                    args.package
                ))
            })?
        }
    };
    let (predicate, derived) = settle_predicate(
        args,
        (&format!("{} {good}", args.package), runs.get(&good)),
        (&format!("{} {bad}", args.package), runs.get(&bad)),
    )?;
    let reference = runs.get(&good).observation.clone();
    let record = |v: &Version, run: &Run, tried: &mut Vec<Tried>| -> Verdict {
        let (verdict, evidence) = judge(&predicate, run, Some(&reference));
        progress(&v.to_string(), verdict, &evidence, run.seconds);
        tried.push(Tried {
            candidate: v.to_string(),
            verdict,
            evidence,
            seconds: run.seconds,
            log: args
                .keep
                .as_ref()
                .map(|_| run.log.to_string_lossy().into_owned()),
            subject: None,
        });
        verdict
    };
    record(&good, runs.get(&good), &mut tried);
    record(&bad, runs.get(&bad), &mut tried);
    let candidates = between(&listed, &good, &bad);
    let mut search = Search::new(candidates.len());
    while let Some(i) = search.next() {
        let v = &candidates[i];
        runs.ensure(v)?;
        let verdict = record(v, runs.get(v), &mut tried);
        search.record(i, verdict);
    }
    let (g, b, undecided) = search.result();
    let (last_good, first_bad) = (candidates[g].to_string(), candidates[b].to_string());
    let (divergence, divergence_note) = diverging_op(
        runs.runs.get(&last_good).and_then(|r| r.capture.as_ref()),
        runs.runs.get(&first_bad).and_then(|r| r.capture.as_ref()),
        args.loss_tol,
    );
    let own: Vec<&Version> = candidates
        .iter()
        .filter(|v| {
            runs.runs
                .get(&v.to_string())
                .is_some_and(|r| r.own_dependencies)
        })
        .collect();
    let mut extra = Vec::new();
    if args.package != "torch" {
        let installed = installer
            .installed()
            .unwrap_or_else(|| "not installed".into());
        extra.push((format!("{} (this environment)", args.package), installed));
    }
    let notes = if own.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "{} {}: installed with the dependencies they require, which differ from this environment's (every other package is this environment's)",
            args.package,
            own.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
        )]
    };
    Ok(BisectReport {
        format: BISECT_FORMAT.to_owned(),
        tool_version: gradsleuth_model::TOOL_VERSION.to_owned(),
        over: "release".to_owned(),
        package: Some(args.package.clone()),
        command: args.command.clone(),
        predicate,
        predicate_derived: derived,
        candidates: candidates.iter().map(Version::to_string).collect(),
        last_good: Some(last_good),
        first_bad: Some(first_bad),
        undecided: undecided
            .iter()
            .map(|&i| candidates[i].to_string())
            .collect(),
        tried,
        divergence,
        divergence_note,
        environment: environment(
            &python,
            &extra
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect::<Vec<_>>(),
        ),
        notes,
    })
}

/// The first op whose result differs between the last good and the first bad run.
fn diverging_op(
    good: Option<&Capture>,
    bad: Option<&Capture>,
    rel_tol: f64,
) -> (Option<gradsleuth_bisect::Divergence>, Option<String>) {
    let (Some(g), Some(b)) = (good, bad) else {
        return (
            None,
            Some("No op comparison: a run left no capture.".into()),
        );
    };
    if g.op_digests.is_empty() || b.op_digests.is_empty() {
        return (
            None,
            Some("No op comparison: a run recorded no op-level step (it ended before its first backward).".into()),
        );
    }
    match first_divergence(&g.op_digests, &b.op_digests, rel_tol) {
        Some(d) => (Some(d), None),
        None => (
            None,
            Some(format!(
                "Every op of the first step returns the same values in both ({} ops compared): the difference lies outside them (the optimizer step, a later step, or the error itself).",
                g.op_digests.len()
            )),
        ),
    }
}
