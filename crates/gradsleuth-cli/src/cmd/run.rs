//! `gradsleuth run`: runs a script in a child interpreter under the tracer
//! (`python -m gradsleuth._run`), then analyses the capture it leaves and prints the report
//! after the script's own output.
//!
//! Distributed (`--nproc-per-node N`, or a `torchrun ...` / `python -m torch.distributed.run
//! ...` command after `--`): the job is started with torch.distributed's own launcher through
//! `python -m gradsleuth._launch`, every rank runs under the tracer and writes its capture,
//! and the captures are merged into one report ([`gradsleuth_analysis::merge`]).
//! `--timeout` ends the whole process tree (the launcher's workers run in their own sessions,
//! so the tree is found through `/proc`, not a process group) and what was captured is still
//! reported.

use std::path::{Path, PathBuf};
use std::process::Command;

use gradsleuth_model::capture::ScriptError;
use gradsleuth_model::Capture;

use crate::{CliError, Output};

#[derive(clap::Args, Debug, Clone)]
#[command(trailing_var_arg = true)]
pub struct RunArgs {
    /// Training steps (optimizer steps; backward calls when there is no optimizer) to observe.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub steps: u32,
    /// End the script once the observed steps are done.
    #[arg(long, conflicts_with = "watch")]
    pub stop_after: bool,
    /// Keep a light monitor on for the whole run: gradient norms every step, update ratios,
    /// NaN/Inf traced to the op and line, exploding/vanishing/dead layers, parameters that stop
    /// learning, GradScaler skip storms.
    #[arg(long)]
    pub watch: bool,
    /// With --watch: write TensorBoard event files to DIR.
    #[arg(long, value_name = "DIR", requires = "watch")]
    pub tensorboard: Option<PathBuf>,
    /// Op-level capture (every torch call, cuts located to the line) of every observed step,
    /// not only the first.
    #[arg(long)]
    pub deep: bool,
    /// Python interpreter to run the script with (default: the one gradsleuth runs in).
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// Also write the capture (re-render it later with `gradsleuth report FILE`).
    #[arg(long, value_name = "FILE")]
    pub save_capture: Option<PathBuf>,
    /// Run a module, as `python -m MODULE`.
    #[arg(short = 'm', value_name = "MODULE")]
    pub module: Option<String>,
    /// Start N processes (ranks) on this machine with torch.distributed's launcher, the tracer
    /// in every rank, and merge what they saw. (Or put a whole `torchrun ...` command after
    /// `--`.)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub nproc_per_node: Option<u32>,
    /// End the run after SECONDS, every process of it, and report what was captured (exit
    /// code 124).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Record what `gradsleuth bisect` compares (each loss, a digest of every op's outputs),
    /// with random generators seeded: host reads a normal run avoids.
    #[arg(long, hide = true)]
    pub probe: bool,
    #[command(flatten)]
    pub output: Output,
    /// The script and its arguments.
    #[arg(value_name = "SCRIPT [ARGS]...", allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// The interpreter: `--python`, else the one that launched gradsleuth (set by the Python
/// entry point), else `python3` on PATH.
fn interpreter(args: &RunArgs) -> PathBuf {
    if let Some(p) = &args.python {
        return p.clone();
    }
    if let Some(p) = std::env::var_os("GRADSLEUTH_PYTHON") {
        return PathBuf::from(p);
    }
    PathBuf::from("python3")
}

/// The torchrun arguments of a distributed run, or None for a single process.
fn launcher_args(args: &RunArgs) -> Result<Option<Vec<String>>, CliError> {
    let first = args.command.first().map(String::as_str).unwrap_or("");
    let base = Path::new(first)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if base == "torchrun" {
        return Ok(Some(args.command[1..].to_vec()));
    }
    if base.starts_with("python")
        && args.command.get(1).map(String::as_str) == Some("-m")
        && args.command.get(2).map(String::as_str) == Some("torch.distributed.run")
    {
        return Ok(Some(args.command[3..].to_vec()));
    }
    let Some(n) = args.nproc_per_node else {
        return Ok(None);
    };
    let mut out = vec![
        "--standalone".to_owned(),
        "--nproc-per-node".to_owned(),
        n.to_string(),
    ];
    match (&args.module, args.command.first()) {
        (Some(m), _) => out.extend(["-m".to_owned(), m.clone()]),
        (None, Some(script)) if Path::new(script).is_file() => {}
        (None, Some(script)) => return Err(CliError::Usage(format!("no such script: {script}"))),
        (None, None) => {
            return Err(CliError::Usage(
                "nothing to run: gradsleuth run --nproc-per-node N train.py [ARGS...]".into(),
            ))
        }
    }
    out.extend(args.command.iter().cloned());
    Ok(Some(out))
}

/// A program that starts the training script itself (`accelerate launch ... train.py`,
/// `lightning run model train.py`, `deepspeed train.py`, `python train.py`): the program found
/// on PATH and the script among its arguments. None when the command is a script (or absent).
/// What a launched job's interpreters run: a script (absolute) or a module (`-m NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Launched {
    Script(PathBuf),
    Module(String),
}

/// The module a launcher's arguments run with `-m NAME` / `-mNAME` (`python -m pkg.train`,
/// `accelerate launch -m pkg.train`, `torchrun -m pkg.train`).
fn module_argument(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-m" || a == "--module" {
            return it.next().filter(|m| is_module_name(m)).cloned();
        }
        if let Some(m) = a.strip_prefix("-m").filter(|m| is_module_name(m)) {
            return Some(m.to_owned());
        }
    }
    None
}

fn is_module_name(m: &str) -> bool {
    !m.is_empty()
        && m.split('.').all(|part| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_alphanumeric() || c == '_')
        })
}

fn launched_script(args: &RunArgs) -> Result<Option<(PathBuf, Launched)>, CliError> {
    if args.module.is_some() {
        return Ok(None);
    }
    let Some(first) = args.command.first() else {
        return Ok(None);
    };
    if Path::new(first).is_file() {
        return Ok(None);
    }
    let Some(program) = on_path(first) else {
        return Ok(None);
    };
    if let Some(script) = args.command[1..]
        .iter()
        .find(|a| a.ends_with(".py") && Path::new(a).is_file())
    {
        let script = std::path::absolute(script).unwrap_or_else(|_| PathBuf::from(script));
        return Ok(Some((program, Launched::Script(script))));
    }
    match module_argument(&args.command[1..]) {
        Some(module) => Ok(Some((program, Launched::Module(module)))),
        None => Err(CliError::Usage(format!(
            "cannot tell which script `{first}` runs: give the training script's path (a .py file) or `-m MODULE` among its arguments"
        ))),
    }
}

/// `name` as the shell would find it: a path with a slash as given, else the first executable
/// file of that name on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            }
            #[cfg(not(unix))]
            {
                p.is_file()
            }
        })
}

pub fn run(args: RunArgs) -> Result<i32, CliError> {
    if let Some(launcher) = launcher_args(&args)? {
        return run_distributed(&args, launcher);
    }
    if let Some((program, launched)) = launched_script(&args)? {
        return run_launched(&args, &program, &launched);
    }
    let (target, script_args) =
        match (&args.module, args.command.split_first()) {
            (Some(m), _) => (format!("-m {m}"), args.command.clone()),
            (None, Some((script, rest))) => {
                let p = Path::new(script);
                if !p.is_file() {
                    return Err(CliError::Usage(format!("no such script: {script}")));
                }
                (script.clone(), rest.to_vec())
            }
            (None, None) => return Err(CliError::Usage(
                "nothing to run: give a script (gradsleuth run train.py [ARGS...]) or -m MODULE"
                    .into(),
            )),
        };
    let dir = tempfile::tempdir()
        .map_err(|e| CliError::Io(format!("cannot create a temporary directory: {e}")))?;
    let capture_path = dir.path().join("capture.json");
    let python = interpreter(&args);
    let mut cmd = Command::new(&python);
    cmd.arg("-m").arg("gradsleuth._run");
    match &args.module {
        Some(m) => cmd.arg("-m").arg(m),
        None => cmd.arg("--").arg(&target),
    };
    cmd.args(&script_args);
    configure(&mut cmd, &args, &capture_path, None)?;
    let (status, timed_out) = spawn_and_wait(&mut cmd, &python, args.timeout)?;
    if let Some(why) = refused(&capture_path) {
        return Err(CliError::Usage(why));
    }
    let script_code = if timed_out {
        124
    } else {
        exit_code_of(&status)
    };
    let mut capture = match std::fs::read_to_string(&capture_path) {
        Ok(text) => Capture::from_json(&text)
            .map_err(|e| CliError::Io(format!("the tracer wrote an unreadable capture: {e}")))?,
        Err(_) => {
            // The child died before writing anything (killed, crashed in native code, or the
            // tracer could not start): report what we know.
            let mut c = Capture::default();
            c.target.script = Some(target.clone());
            c.target.argv = script_args.clone();
            c.error = Some(ScriptError {
                kind: describe_status(&status),
                message: "the script ended before gradsleuth could record anything".into(),
                location: None,
                ..Default::default()
            });
            c
        }
    };
    let stopped = capture
        .error
        .as_ref()
        .is_none_or(|e| e.kind == "Terminated");
    if timed_out && stopped {
        // The script's SIGTERM handler saved where it was when the timeout stopped it.
        let at = capture
            .error
            .take()
            .and_then(|e| e.location)
            .map(|l| {
                let line = l.snippet.as_deref().map(str::trim).unwrap_or_default();
                format!(", at {}:{} `{line}`", l.file, l.line)
            })
            .unwrap_or_default();
        capture.error = Some(ScriptError {
            kind: "Timeout".into(),
            message: format!(
                "gradsleuth ended the script after --timeout {}s{}{at}",
                args.timeout.unwrap_or_default(),
                capture
                    .progress
                    .as_ref()
                    .map(|p| format!(
                        "; last seen {}",
                        gradsleuth_analysis::merge::phase_text(Some(&(
                            p.step,
                            p.phase.to_string()
                        )))
                    ))
                    .unwrap_or_default()
            ),
            location: None,
            ..Default::default()
        });
    }
    if capture.target.script.is_none() {
        capture.target.script = Some(target);
    }
    single(&args, capture, script_code)
}

/// One process's capture: saved if asked, analysed, reported; the script's exit code wins.
fn single(args: &RunArgs, capture: Capture, script_code: i32) -> Result<i32, CliError> {
    if let Some(save) = &args.save_capture {
        std::fs::write(save, capture.to_json())
            .map_err(|e| CliError::Io(format!("cannot write {}: {e}", save.display())))?;
    }
    let report = gradsleuth_analysis::analyze_annotated(&capture, gradsleuth_lint::cross_reference);
    let code = args.output.emit_full(&report, &[], Some(&capture))?;
    Ok(if script_code != 0 { script_code } else { code })
}

/// Where the job's interpreters write why they would not trace (next to the captures, not
/// `*.json`).
fn refusal_path(capture_path: &Path) -> PathBuf {
    capture_path.with_file_name("gradsleuth-refused.txt")
}

/// Why an interpreter of the job would not trace (its torch is too old), as it wrote it.
fn refused(capture_path: &Path) -> Option<String> {
    std::fs::read_to_string(refusal_path(capture_path))
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// What every traced process gets (single run or each rank): the typed run configuration,
/// written next to the captures, and its path in the environment.
fn configure(
    cmd: &mut Command,
    args: &RunArgs,
    capture_path: &Path,
    launched: Option<&Launched>,
) -> Result<(), CliError> {
    let config = gradsleuth_model::RunConfig {
        capture: Some(capture_path.to_string_lossy().into_owned()),
        steps: args.steps,
        stop_after: args.stop_after,
        deep: args.deep,
        watch: args.watch,
        tensorboard: args.tensorboard.as_ref().map(|dir| {
            std::path::absolute(dir)
                .unwrap_or_else(|_| dir.clone())
                .to_string_lossy()
                .into_owned()
        }),
        script: match launched {
            Some(Launched::Script(s)) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        },
        module: match launched {
            Some(Launched::Module(m)) => Some(m.clone()),
            _ => None,
        },
        refusal: Some(refusal_path(capture_path).to_string_lossy().into_owned()),
        probe: args.probe,
        ..Default::default()
    };
    // Not `*.json`: the folder's JSON files are the ranks' captures.
    let path = capture_path.with_file_name("gradsleuth-run.config");
    std::fs::write(&path, config.to_json())
        .map_err(|e| CliError::Io(format!("cannot write {}: {e}", path.display())))?;
    cmd.env(gradsleuth_model::run_config::RUN_CONFIG_ENV, &path);
    if args.python.is_some() {
        // Another interpreter may not have gradsleuth installed: lend it ours.
        if let Some(pkg) = std::env::var_os("GRADSLEUTH_PACKAGE_PATH") {
            let mut paths = vec![PathBuf::from(pkg)];
            if let Some(old) = std::env::var_os("PYTHONPATH") {
                paths.extend(std::env::split_paths(&old));
            }
            if let Ok(joined) = std::env::join_paths(paths) {
                cmd.env("PYTHONPATH", joined);
            }
        }
    }
    Ok(())
}

/// Starts `cmd` and waits for it, at most `timeout` seconds; on timeout every process it
/// started (found through /proc, wherever they moved their session) is terminated.
fn spawn_and_wait(
    cmd: &mut Command,
    python: &Path,
    timeout: Option<f64>,
) -> Result<(std::process::ExitStatus, bool), CliError> {
    let mut child = cmd.spawn().map_err(|e| {
        CliError::Usage(format!(
            "cannot start {}: {e} (use --python to choose the interpreter)",
            python.display()
        ))
    })?;
    let waited = |r: std::io::Result<std::process::ExitStatus>| {
        r.map_err(|e| CliError::Io(format!("waiting for the script: {e}")))
    };
    let Some(limit) = timeout else {
        return Ok((waited(child.wait())?, false));
    };
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_secs_f64(limit.clamp(0.0, 1e9));
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| CliError::Io(format!("waiting for the script: {e}")))?
        {
            return Ok((status, false));
        }
        if std::time::Instant::now() >= deadline {
            eprintln!(
                "gradsleuth: --timeout {limit}s reached: stopping the script and every process it started"
            );
            crate::proc::kill_tree(child.id(), std::time::Duration::from_secs(5));
            return Ok((waited(child.wait())?, true));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A job another program starts: the program runs as given, with the bootstrap folder first
/// on PYTHONPATH; every interpreter of the job that runs `script` (the program's own child, a
/// launcher's ranks, a script that re-executes itself per rank) starts the tracer and writes
/// its capture, and the captures are merged as a distributed run's are.
fn run_launched(args: &RunArgs, program: &Path, launched: &Launched) -> Result<i32, CliError> {
    let dir = tempfile::tempdir()
        .map_err(|e| CliError::Io(format!("cannot create a temporary directory: {e}")))?;
    let pattern = dir.path().join("pid{pid}-rank{rank}.json");
    let mut cmd = Command::new(program);
    cmd.args(&args.command[1..]);
    // The configuration names the script (or module) the job's interpreters look for.
    configure(&mut cmd, args, &pattern, Some(launched))?;
    let Some(pkg) = std::env::var_os("GRADSLEUTH_PACKAGE_PATH") else {
        return Err(CliError::Usage(
            "running a launcher command needs the gradsleuth package: start gradsleuth from its Python installation (`gradsleuth` or `python -m gradsleuth`)".into(),
        ));
    };
    // Only the bootstrap folder: the job's interpreters keep their own packages (the bootstrap
    // finds gradsleuth next to itself when an interpreter lacks it).
    let mut paths = vec![Path::new(&pkg).join("gradsleuth").join("_bootstrap")];
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        paths.extend(std::env::split_paths(&old));
    }
    if let Ok(joined) = std::env::join_paths(paths) {
        cmd.env("PYTHONPATH", joined);
    }
    let (status, timed_out) = spawn_and_wait(&mut cmd, program, args.timeout)?;
    if let Some(why) = refused(&pattern) {
        // The job ran untraced (its interpreters said so as it started): say why, once.
        return Err(CliError::Usage(why));
    }
    let what = format!("`{}`", args.command.join(" "));
    collect(args, &dir, status, timed_out, &what)
}

/// A distributed run: the launcher, every rank's capture, one merged report.
fn run_distributed(args: &RunArgs, launcher: Vec<String>) -> Result<i32, CliError> {
    let dir = tempfile::tempdir()
        .map_err(|e| CliError::Io(format!("cannot create a temporary directory: {e}")))?;
    let pattern = dir.path().join("rank{rank}.json");
    let python = interpreter(args);
    let mut cmd = Command::new(&python);
    cmd.arg("-m").arg("gradsleuth._launch").args(&launcher);
    configure(&mut cmd, args, &pattern, None)?;
    let (status, timed_out) = spawn_and_wait(&mut cmd, &python, args.timeout)?;
    if let Some(why) = refused(&pattern) {
        return Err(CliError::Usage(why));
    }
    collect(args, &dir, status, timed_out, "the distributed job")
}

/// The captures a job's processes left in `dir`, merged into one report.
fn collect(
    args: &RunArgs,
    dir: &tempfile::TempDir,
    status: std::process::ExitStatus,
    timed_out: bool,
    what: &str,
) -> Result<i32, CliError> {
    let launcher_code = if timed_out {
        124
    } else {
        exit_code_of(&status)
    };
    let files = crate::cmd::report::capture_files(&[dir.path().to_path_buf()]).unwrap_or_default();
    if files.is_empty() {
        eprintln!(
            "gradsleuth: error: {what} ended ({}) before any process of it started under gradsleuth; see its output above",
            describe_status(&status)
        );
        return Ok(if launcher_code == 0 { 2 } else { launcher_code });
    }
    if files.len() == 1 && args.nproc_per_node.is_none() {
        // One process of the job ran the script (a launcher's single worker): its own report.
        if let Ok(capture) = crate::cmd::report::load(&files[0]) {
            if capture.dist.is_none() {
                return single(args, capture, launcher_code);
            }
        }
    }
    let mut merger = gradsleuth_analysis::merge::Merger::new(args.nproc_per_node.unwrap_or(0))
        .annotated(gradsleuth_lint::cross_reference);
    if timed_out {
        merger.timed_out();
    }
    for f in &files {
        let rank = crate::cmd::report::rank_of(f).unwrap_or(0);
        match crate::cmd::report::load(f) {
            Ok(c) => merger.add(&c, rank),
            Err(e) => merger.missing(rank, format!("its capture is unreadable ({e})")),
        }
    }
    if let Some(save) = &args.save_capture {
        std::fs::create_dir_all(save)
            .map_err(|e| CliError::Io(format!("cannot create {}: {e}", save.display())))?;
        for f in &files {
            if let Some(name) = f.file_name() {
                std::fs::copy(f, save.join(name))
                    .map_err(|e| CliError::Io(format!("cannot write {}: {e}", save.display())))?;
            }
        }
    }
    let report = merger.finish();
    let code = args.output.emit(&report)?;
    Ok(if launcher_code != 0 {
        launcher_code
    } else {
        code
    })
}

pub(crate) fn exit_code_of(status: &std::process::ExitStatus) -> i32 {
    if let Some(c) = status.code() {
        return c;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return 128 + sig;
        }
    }
    1
}

fn describe_status(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                6 => "SIGABRT",
                9 => "SIGKILL",
                11 => "SIGSEGV",
                15 => "SIGTERM",
                _ => "a signal",
            };
            return format!("killed by {name} ({sig})");
        }
    }
    format!("exit code {}", status.code().unwrap_or(-1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_module_a_launcher_runs_is_read_from_every_spelling_of_dash_m() {
        let cases = [
            ("-m pkg.train --lr 1", Some("pkg.train")),
            ("launch --cpu -m pkg.train", Some("pkg.train")),
            ("--nproc-per-node 2 --module train", Some("train")),
            ("-mtrain", Some("train")),
            ("-u -m my_pkg.sub._main x", Some("my_pkg.sub._main")),
            ("launch --cpu train", None),
            ("-m", None),
            ("-m ./train", None),
            ("--mixed_precision no", None),
        ];
        for (line, want) in cases {
            assert_eq!(module_argument(&args(line)).as_deref(), want, "{line}");
        }
    }
}
