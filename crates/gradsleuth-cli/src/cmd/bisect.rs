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

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use gradsleuth_bisect::predicate::{derive, Observation, Predicate};
use gradsleuth_bisect::report::{BisectReport, Tried, BISECT_FORMAT};
use gradsleuth_bisect::version::{between, Version};
use gradsleuth_bisect::{first_divergence, Search, Verdict};
use gradsleuth_model::{Capture, Report};
use serde::{Deserialize, Serialize};

use crate::CliError;

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

/// What every `bisect-step` of one `bisect --git` shares.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StepConfig {
    predicate: Predicate,
    reference: Option<Observation>,
    command: Vec<String>,
    steps: u32,
    timeout: f64,
    python: Option<PathBuf>,
    /// Runs go here, one folder per commit; `tried.jsonl` collects the verdicts.
    work: PathBuf,
}

/// One run of the script (and the user's command) in one candidate's environment.
struct Run {
    /// How the candidate was installed, when that is worth telling.
    note: Option<String>,
    observation: Observation,
    capture: Option<Capture>,
    /// Why nothing could be judged (the environment or gradsleuth failed, not the script).
    broken: Option<String>,
    log: PathBuf,
    seconds: f64,
}

/// Starts runs: `gradsleuth run --probe` of the script, the user's command.
struct Runner {
    command: Vec<String>,
    shell: Option<String>,
    steps: u32,
    timeout: f64,
    python: Option<PathBuf>,
    work: PathBuf,
}

/// This program, as a command: `python -m gradsleuth` under the Python entry point, else the
/// executable itself.
fn own_command() -> Vec<OsString> {
    match std::env::var_os("GRADSLEUTH_PYTHON") {
        Some(py) if std::env::var_os("GRADSLEUTH_PACKAGE_PATH").is_some() => {
            vec![py, "-m".into(), "gradsleuth".into()]
        }
        _ => vec![std::env::current_exe()
            .map(PathBuf::into_os_string)
            .unwrap_or_else(|_| "gradsleuth".into())],
    }
}

/// The interpreter whose environment the candidates overlay.
fn base_python(python: Option<&PathBuf>) -> PathBuf {
    python
        .cloned()
        .or_else(|| std::env::var_os("GRADSLEUTH_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"))
}

fn safe_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect()
}

fn io(what: &str) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |e| CliError::Io(format!("{what}: {e}"))
}

impl Runner {
    /// Runs the script (and the command) with `overlay` first on PYTHONPATH, in `cwd`.
    fn run(
        &self,
        label: &str,
        overlay: Option<&Path>,
        cwd: Option<&Path>,
    ) -> Result<Run, CliError> {
        let dir = self.work.join(safe_name(label));
        std::fs::create_dir_all(&dir).map_err(io("cannot create a run folder"))?;
        let log = dir.join("output.log");
        let started = Instant::now();
        let mut env: Vec<(OsString, OsString)> = Vec::new();
        if let Some(o) = overlay {
            let mut paths = vec![o.to_path_buf()];
            if let Some(old) = std::env::var_os("PYTHONPATH") {
                paths.extend(std::env::split_paths(&old));
            }
            if let Ok(joined) = std::env::join_paths(paths) {
                env.push(("PYTHONPATH".into(), joined));
            }
        }
        let mut observation = Observation::default();
        let mut capture = None;
        let mut broken = None;
        if !self.command.is_empty() {
            let cap_path = dir.join("capture.json");
            let report_path = dir.join("report.json");
            let _ = std::fs::remove_file(&report_path);
            let own = own_command();
            let mut cmd = Command::new(&own[0]);
            cmd.args(&own[1..])
                .arg("run")
                .arg("--probe")
                .arg("--stop-after");
            cmd.arg("--steps").arg(self.steps.to_string());
            cmd.arg("--save-capture").arg(&cap_path);
            cmd.args(["--format", "json", "--fail-on", "never"]);
            cmd.arg("--out").arg(&report_path);
            cmd.arg("--timeout").arg(self.timeout.to_string());
            if let Some(py) = &self.python {
                cmd.arg("--python").arg(py);
            }
            cmd.arg("--").args(&self.command);
            let code = self.spawn(cmd, &env, cwd, &log, false)?;
            let report = std::fs::read_to_string(&report_path)
                .ok()
                .and_then(|t| Report::from_json(&t).ok());
            capture = std::fs::read_to_string(&cap_path)
                .ok()
                .and_then(|t| Capture::from_json(&t).ok());
            match report {
                Some(r) => observation = Observation::from_run(&r, capture.as_ref(), code),
                None => {
                    broken = Some(last_error(&log).unwrap_or_else(|| {
                        format!("gradsleuth run ended with exit code {code} and no report")
                    }));
                    observation.exit_code = code;
                }
            }
        }
        if let Some(shell) = &self.shell {
            let mut cmd = Command::new("sh");
            cmd.arg("-c").arg(shell);
            if let Some(o) = overlay {
                // A console script the candidate installed comes first too.
                let mut paths = vec![o.join("bin")];
                if let Some(old) = std::env::var_os("PATH") {
                    paths.extend(std::env::split_paths(&old));
                }
                if let Ok(joined) = std::env::join_paths(paths) {
                    env.push(("PATH".into(), joined));
                }
            }
            observation.exit_code = self.spawn(cmd, &env, cwd, &log, true)?;
            broken = None;
        }
        Ok(Run {
            note: None,
            observation,
            capture,
            broken,
            log,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    fn spawn(
        &self,
        mut cmd: Command,
        env: &[(OsString, OsString)],
        cwd: Option<&Path>,
        log: &Path,
        append: bool,
    ) -> Result<i32, CliError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(append)
            .write(true)
            .truncate(!append)
            .open(log)
            .map_err(io("cannot write a run's log"))?;
        let err = file.try_clone().map_err(io("cannot write a run's log"))?;
        cmd.stdin(Stdio::null()).stdout(file).stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(d) = cwd {
            cmd.current_dir(d);
        }
        let status = cmd
            .status()
            .map_err(|e| CliError::Io(format!("cannot start {:?}: {e}", cmd.get_program())))?;
        Ok(super::run::exit_code_of(&status))
    }
}

/// The last `gradsleuth: error: ...` (or last non-empty) line of a run's output.
fn last_error(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .rev()
        .find(|l| l.starts_with("gradsleuth: error:"))
        .or(lines.last())
        .map(|l| {
            l.trim_start_matches("gradsleuth: error: ")
                .chars()
                .take(300)
                .collect()
        })
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

// ---- releases ----------------------------------------------------------------------------

/// Finds a program: on PATH, or next to the interpreter (a virtual environment's `bin`).
fn tool(name: &str, python: &Path) -> Option<PathBuf> {
    if let Some(dir) = python.parent() {
        let p = dir.join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn output(cmd: &mut Command) -> Result<(bool, String, String), CliError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| CliError::Io(format!("cannot start {:?}: {e}", cmd.get_program())))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Installs releases into overlay folders.
struct Installer {
    python: PathBuf,
    package: String,
    uv: Option<PathBuf>,
    /// `name==version` of everything else installed: what a candidate must keep.
    constraints: PathBuf,
    cache: PathBuf,
    python_tag: String,
}

impl Installer {
    fn new(python: &Path, package: &str, work: &Path) -> Result<Installer, CliError> {
        let (ok, tag, err) = output(Command::new(python).args([
            "-c",
            "import sys; print(f'py{sys.version_info[0]}.{sys.version_info[1]}')",
        ]))?;
        if !ok {
            return Err(CliError::Usage(format!(
                "cannot run {}: {}",
                python.display(),
                err.trim()
            )));
        }
        let uv = tool("uv", python);
        let freeze = match &uv {
            Some(uv) => output(
                Command::new(uv)
                    .args(["pip", "freeze", "--python"])
                    .arg(python),
            )?,
            None => output(Command::new(python).args(["-m", "pip", "freeze"]))?,
        };
        let norm = |s: &str| s.to_ascii_lowercase().replace(['_', '.'], "-");
        let own = norm(package);
        let pins: Vec<&str> = freeze
            .1
            .lines()
            .filter(|l| l.contains("==") && !l.starts_with('-') && !l.contains(" @ "))
            .filter(|l| {
                let name = norm(l.split("==").next().unwrap_or(""));
                name != own && name != "gradsleuth"
            })
            .collect();
        let constraints = work.join("constraints.txt");
        std::fs::write(&constraints, pins.join("\n") + "\n")
            .map_err(io("cannot write the constraints"))?;
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir)
            .join("gradsleuth")
            .join("bisect");
        Ok(Installer {
            python: python.to_path_buf(),
            package: package.to_owned(),
            uv,
            constraints,
            cache,
            python_tag: tag.trim().to_owned(),
        })
    }

    /// The installed version of the package, if any.
    fn installed(&self) -> Option<String> {
        let code = format!(
            "import importlib.metadata as m; print(m.version({:?}))",
            self.package
        );
        let (ok, out, _) = output(Command::new(&self.python).args(["-c", &code])).ok()?;
        ok.then(|| out.trim().to_owned()).filter(|s| !s.is_empty())
    }

    /// Every release the package index lists for this Python.
    fn listed(&self) -> Result<Vec<String>, CliError> {
        let (ok, out, err) = output(
            Command::new(&self.python)
                .args(["-m", "pip", "index", "versions", &self.package])
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
        )?;
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix("Available versions:"));
        match (ok, line) {
            (true, Some(l)) => Ok(l.split(',').map(|v| v.trim().to_owned()).collect()),
            _ => Err(CliError::Usage(format!(
                "cannot list the releases of {} ({}): name them with --versions V1,V2,...",
                self.package,
                err.lines()
                    .last()
                    .unwrap_or("pip index versions failed")
                    .trim()
            ))),
        }
    }

    /// The overlay folder holding `version` (installed on first use). Err: why it cannot be
    /// installed here.
    fn overlay(&self, version: &str) -> Result<(PathBuf, Option<String>), String> {
        let dir = self.cache.join(format!(
            "{}-{}-{}",
            safe_name(&self.package),
            safe_name(version),
            self.python_tag
        ));
        let done = dir.join(".gradsleuth-complete");
        if let Ok(note) = std::fs::read_to_string(&done) {
            return Ok((dir, Some(note).filter(|n| !n.trim().is_empty())));
        }
        let _ = std::fs::remove_dir_all(&dir);
        let spec = format!("{}=={version}", self.package);
        let attempt = |constrained: bool| -> Result<(), String> {
            let mut cmd = match &self.uv {
                Some(uv) => {
                    let mut c = Command::new(uv);
                    c.args(["pip", "install", "-q", "--target"]).arg(&dir);
                    c.arg("--python").arg(&self.python);
                    c
                }
                None => {
                    let mut c = Command::new(&self.python);
                    c.args(["-m", "pip", "install", "-q", "--target"]).arg(&dir);
                    c
                }
            };
            cmd.arg(&spec);
            if constrained {
                cmd.arg("--constraint").arg(&self.constraints);
            }
            let (ok, _, err) = output(&mut cmd).map_err(|e| e.to_string())?;
            if ok {
                Ok(())
            } else {
                let _ = std::fs::remove_dir_all(&dir);
                Err(err
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(" "))
            }
        };
        let note = match attempt(true) {
            Ok(()) => None,
            Err(_) => match attempt(false) {
                Ok(()) => Some("own".to_owned()),
                Err(e) => return Err(format!("cannot install {spec} for this Python: {e}")),
            },
        };
        let _ = std::fs::write(&done, note.clone().unwrap_or_default());
        Ok((dir, note))
    }
}

fn environment(
    python: &Path,
    extra: &[(&str, String)],
) -> std::collections::BTreeMap<String, String> {
    let mut env = std::collections::BTreeMap::new();
    if let Ok((true, out, _)) = output(Command::new(python).args([
        "-c",
        "import platform; print(platform.python_version()); print(platform.platform())",
    ])) {
        let mut lines = out.lines();
        if let Some(v) = lines.next() {
            env.insert("python".to_owned(), v.to_owned());
        }
        if let Some(v) = lines.next() {
            env.insert("os".to_owned(), v.to_owned());
        }
    }
    env.insert(
        "gradsleuth".to_owned(),
        gradsleuth_model::TOOL_VERSION.to_owned(),
    );
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
            Ok((dir, note)) => {
                let mut r = self.runner.run(&label, Some(&dir), None)?;
                r.note = note;
                r
            }
            Err(why) => Run {
                note: None,
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

fn release_bisect(args: &BisectArgs, work: &Path) -> Result<BisectReport, CliError> {
    let python = base_python(args.python.as_ref());
    let installer = Installer::new(&python, &args.package, work)?;
    let runner = Runner {
        command: args.command.clone(),
        shell: args.predicate.shell.clone(),
        steps: args.steps,
        timeout: args.timeout,
        python: args.python.clone(),
        work: work.to_path_buf(),
    };
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
                    Some(p) => judge(p, run, Some(&run.observation)).0,
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
    let installed = installer
        .installed()
        .unwrap_or_else(|| "not installed".into());
    let mut own: Vec<&Version> = candidates
        .iter()
        .filter(|v| {
            runs.runs
                .get(&v.to_string())
                .is_some_and(|r| r.note.is_some())
        })
        .collect();
    own.dedup();
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
            &[(&format!("{} (installed)", args.package), installed)],
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

// ---- commits -----------------------------------------------------------------------------

fn git(dir: &Path, args: &[&str]) -> Result<String, CliError> {
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

fn git_bisect(
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
    let runner = Runner {
        command: args.command.clone(),
        shell: args.predicate.shell.clone(),
        steps: args.steps,
        timeout: args.timeout,
        python: args.python.clone(),
        work: work.join("runs"),
    };
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
