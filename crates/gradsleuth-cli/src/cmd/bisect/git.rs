//! `bisect --git`: the commits of the user's repository, searched by `git bisect run` in a
//! temporary clone, each step a hidden `gradsleuth bisect-step` run.

use std::path::{Path, PathBuf};
use std::process::Command;

use gradsleuth_bisect::predicate::{Observation, Predicate};
use gradsleuth_bisect::report::{BisectReport, Tried, BISECT_FORMAT};
use gradsleuth_bisect::Verdict;
use gradsleuth_model::Capture;
use serde::{Deserialize, Serialize};

use super::install::output;
use super::runner::{base_python, io, own_command, safe_name, Run, Runner};
use super::{diverging_op, environment, judge, progress, settle_predicate, BisectArgs, StepArgs};
use crate::CliError;

/// What every `bisect-step` of one `bisect --git` shares.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StepConfig {
    pub(super) predicate: Predicate,
    pub(super) reference: Option<Observation>,
    pub(super) command: Vec<String>,
    pub(super) steps: u32,
    pub(super) timeout: f64,
    pub(super) python: Option<PathBuf>,
    /// Runs go here, one folder per commit; `tried.jsonl` collects the verdicts.
    pub(super) work: PathBuf,
}

pub(super) fn git(dir: &Path, args: &[&str]) -> Result<String, CliError> {
    let (ok, out, err) = output(Command::new("git").arg("-C").arg(dir).args(args))?;
    if ok {
        Ok(out.trim().to_owned())
    } else {
        Err(CliError::Usage(format!(
            "git {}: {}",
            args.join(" "),
            err.trim()
        )))
    }
}

pub(super) fn git_bisect(
    args: &BisectArgs,
    good: &str,
    bad: &str,
    work: &Path,
) -> Result<BisectReport, CliError> {
    let here = match args.command.first() {
        Some(s) if Path::new(s).exists() => std::path::absolute(s)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from(".")),
        _ => std::env::current_dir().map_err(io("no working directory"))?,
    };
    let top = PathBuf::from(git(&here, &["rev-parse", "--show-toplevel"]).map_err(|_| {
        CliError::Usage(format!(
            "{} is not inside a git repository (--git bisects its commits)",
            here.display()
        ))
    })?);
    let cwd = std::env::current_dir().map_err(io("no working directory"))?;
    let rel_cwd = cwd
        .strip_prefix(&top)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let good_sha = git(
        &top,
        &["rev-parse", "--verify", &format!("{good}^{{commit}}")],
    )?;
    let bad_sha = git(
        &top,
        &["rev-parse", "--verify", &format!("{bad}^{{commit}}")],
    )?;
    let clone = work.join("checkout");
    let _ = std::fs::remove_dir_all(&clone);
    let (ok, _, err) = output(
        Command::new("git")
            .args(["clone", "-q", "--no-checkout"])
            .arg(&top)
            .arg(&clone),
    )?;
    if !ok {
        return Err(CliError::Io(format!(
            "cannot clone {}: {}",
            top.display(),
            err.trim()
        )));
    }
    let run_dir = clone.join(&rel_cwd);
    let python = base_python(args.python.as_ref());
    let runner = Runner::of(args, work.join("runs"));
    let at = |sha: &str| -> Result<Run, CliError> {
        git(&clone, &["checkout", "-q", "--force", sha])?;
        runner.run(&sha[..12.min(sha.len())], None, Some(&run_dir))
    };
    let good_run = at(&good_sha)?;
    let bad_run = at(&bad_sha)?;
    let short = |s: &str| s[..12.min(s.len())].to_owned();
    let (predicate, derived) = settle_predicate(
        args,
        (&format!("commit {}", short(&good_sha)), &good_run),
        (&format!("commit {}", short(&bad_sha)), &bad_run),
    )?;
    let mut tried = Vec::new();
    for (sha, run) in [(&good_sha, &good_run), (&bad_sha, &bad_run)] {
        let (verdict, evidence) = judge(&predicate, run, Some(&good_run.observation));
        progress(&short(sha), verdict, &evidence, run.seconds);
        tried.push(Tried {
            candidate: short(sha),
            verdict,
            evidence,
            seconds: run.seconds,
            log: None,
            subject: git(&clone, &["log", "-1", "--format=%s", sha]).ok(),
        });
    }
    let candidates: Vec<String> = std::iter::once(short(&good_sha))
        .chain(
            git(
                &clone,
                &[
                    "rev-list",
                    "--reverse",
                    "--ancestry-path",
                    &format!("{good_sha}..{bad_sha}"),
                ],
            )?
            .lines()
            .map(short),
        )
        .collect();
    let step = StepConfig {
        predicate: predicate.clone(),
        reference: Some(good_run.observation.clone()),
        command: args.command.clone(),
        steps: args.steps,
        timeout: args.timeout,
        python: args.python.clone(),
        work: work.join("runs"),
    };
    let step_path = work.join("step.json");
    std::fs::write(&step_path, serde_json::to_string(&step).unwrap_or_default())
        .map_err(io("cannot write the step configuration"))?;
    let _ = std::fs::remove_file(work.join("runs").join("tried.jsonl"));
    git(&clone, &["bisect", "start", &bad_sha, &good_sha])?;
    let own = own_command();
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(&clone).args(["bisect", "run"]).args(&own);
    cmd.arg("bisect-step").arg(&step_path);
    // The runs happen in the checkout's copy of the working directory.
    cmd.env("GRADSLEUTH_BISECT_CWD", &rel_cwd);
    let (ok, out, err) = output(&mut cmd)?;
    if !ok {
        return Err(CliError::Usage(format!(
            "git bisect run failed: {}",
            err.lines().chain(out.lines()).last().unwrap_or("").trim()
        )));
    }
    let first_bad = git(&clone, &["rev-parse", "refs/bisect/bad"])?;
    if let Ok(text) = std::fs::read_to_string(work.join("runs").join("tried.jsonl")) {
        for line in text.lines() {
            if let Ok(t) = serde_json::from_str::<Tried>(line) {
                tried.push(t);
            }
        }
    }
    // The good neighbour: the first bad commit's parent (good by the search).
    let parent =
        git(&clone, &["rev-parse", &format!("{first_bad}^")]).unwrap_or_else(|_| good_sha.clone());
    let undecided: Vec<String> = out
        .lines()
        .skip_while(|l| !l.contains("There are only 'skip'ped commits left"))
        .filter(|l| l.len() >= 40 && l.chars().take(40).all(|c| c.is_ascii_hexdigit()))
        .map(&short)
        .collect();
    let _ = git(&clone, &["bisect", "reset", "--quiet"]);
    let load = |sha: &str| -> Option<Capture> {
        let p = work
            .join("runs")
            .join(safe_name(&short(sha)))
            .join("capture.json");
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| Capture::from_json(&t).ok())
    };
    let (divergence, divergence_note) = diverging_op(
        load(&parent).as_ref(),
        load(&first_bad).as_ref(),
        args.loss_tol,
    );
    Ok(BisectReport {
        format: BISECT_FORMAT.to_owned(),
        tool_version: gradsleuth_model::TOOL_VERSION.to_owned(),
        over: "commit".to_owned(),
        package: None,
        command: args.command.clone(),
        predicate,
        predicate_derived: derived,
        candidates,
        last_good: Some(short(&parent)),
        first_bad: Some(short(&first_bad)),
        undecided,
        tried,
        divergence,
        divergence_note,
        environment: environment(
            &python,
            &bad_run
                .observation
                .torch
                .iter()
                .map(|t| ("torch", t.clone()))
                .collect::<Vec<_>>(),
        ),
        notes: vec![format!(
            "commits were checked out into a fresh clone: changes not committed in {} are not part of the search",
            top.display()
        )],
    })
}

/// `gradsleuth bisect-step CONFIG` (what `git bisect run` calls).
pub fn step(args: StepArgs) -> Result<i32, CliError> {
    let text =
        std::fs::read_to_string(&args.config).map_err(io("cannot read the step configuration"))?;
    let config: StepConfig = serde_json::from_str(&text)
        .map_err(|e| CliError::Usage(format!("not a bisect step configuration: {e}")))?;
    let top = std::env::current_dir().map_err(io("no working directory"))?;
    let cwd = match std::env::var_os("GRADSLEUTH_BISECT_CWD") {
        Some(rel) => top.join(rel),
        None => top.clone(),
    };
    let sha = git(&top, &["rev-parse", "HEAD"])?;
    let short = sha[..12.min(sha.len())].to_owned();
    let shell = match &config.predicate {
        Predicate::Exit { command } => Some(command.clone()),
        _ => None,
    };
    let runner = Runner {
        command: config.command.clone(),
        shell,
        steps: config.steps,
        timeout: config.timeout,
        python: config.python.clone(),
        work: config.work.clone(),
    };
    let run = runner.run(&short, None, Some(&cwd))?;
    let (verdict, evidence) = judge(&config.predicate, &run, config.reference.as_ref());
    progress(&short, verdict, &evidence, run.seconds);
    let tried = Tried {
        candidate: short,
        verdict,
        evidence,
        seconds: run.seconds,
        log: None,
        subject: git(&top, &["log", "-1", "--format=%s", &sha]).ok(),
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(config.work.join("tried.jsonl"))
    {
        use std::io::Write;
        let _ = writeln!(f, "{}", serde_json::to_string(&tried).unwrap_or_default());
    }
    Ok(match verdict {
        Verdict::Good => 0,
        Verdict::Bad => 1,
        Verdict::Skip => 125,
    })
}
