//! Runs of the script (`gradsleuth run --probe`, as a child of this very program) and of the
//! user's command, in one candidate's environment, with their output kept in a log.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use gradsleuth_bisect::predicate::Observation;
use gradsleuth_model::{Capture, Report};

use crate::CliError;

/// One run of the script (and the user's command) in one candidate's environment.
pub(super) struct Run {
    /// The candidate was installed with its own dependencies.
    pub(super) own_dependencies: bool,
    pub(super) observation: Observation,
    pub(super) capture: Option<Capture>,
    /// Why nothing could be judged (the environment or gradsleuth failed, not the script).
    pub(super) broken: Option<String>,
    pub(super) log: PathBuf,
    pub(super) seconds: f64,
}

/// Starts runs: `gradsleuth run --probe` of the script, the user's command.
pub(super) struct Runner {
    pub(super) command: Vec<String>,
    pub(super) shell: Option<String>,
    pub(super) steps: u32,
    pub(super) timeout: f64,
    pub(super) python: Option<PathBuf>,
    pub(super) work: PathBuf,
}

/// This program, as a command: `python -m gradsleuth` under the Python entry point, else the
/// executable itself.
pub(super) fn own_command() -> Vec<OsString> {
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
pub(super) fn base_python(python: Option<&PathBuf>) -> PathBuf {
    python
        .cloned()
        .or_else(|| std::env::var_os("GRADSLEUTH_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"))
}

pub(super) fn safe_name(s: &str) -> String {
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

pub(super) fn io(what: &str) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |e| CliError::Io(format!("{what}: {e}"))
}

impl Runner {
    /// Runs the script (and the command) with `overlay` first on PYTHONPATH, in `cwd`.
    pub(super) fn run(
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
            own_dependencies: false,
            observation,
            capture,
            broken,
            log,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    pub(super) fn spawn(
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
        Ok(crate::cmd::run::exit_code_of(&status))
    }
}

/// The last `gradsleuth: error: ...` (or last non-empty) line of a run's output.
pub(super) fn last_error(log: &Path) -> Option<String> {
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
