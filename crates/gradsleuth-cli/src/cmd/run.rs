//! `gradsleuth run`: runs a script in a child interpreter under the tracer
//! (`python -m gradsleuth._run`), then analyses the capture it leaves and prints the report
//! after the script's own output.

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
    #[arg(long)]
    pub stop_after: bool,
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

pub fn run(args: RunArgs) -> Result<i32, CliError> {
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
    cmd.args(&script_args)
        .env("GRADSLEUTH_CAPTURE", &capture_path)
        .env("GRADSLEUTH_STEPS", args.steps.to_string())
        .env(
            "GRADSLEUTH_STOP_AFTER",
            if args.stop_after { "1" } else { "0" },
        );
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
    let status = cmd.status().map_err(|e| {
        CliError::Usage(format!(
            "cannot start {}: {e} (use --python to choose the interpreter)",
            python.display()
        ))
    })?;
    let script_code = exit_code_of(&status);
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
            });
            c
        }
    };
    if let Some(save) = &args.save_capture {
        std::fs::write(save, capture.to_json())
            .map_err(|e| CliError::Io(format!("cannot write {}: {e}", save.display())))?;
    }
    if capture.target.script.is_none() {
        capture.target.script = Some(target);
    }
    let report = gradsleuth_analysis::analyze(&capture);
    let code = args.output.emit(&report)?;
    Ok(if script_code != 0 { script_code } else { code })
}

fn exit_code_of(status: &std::process::ExitStatus) -> i32 {
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
