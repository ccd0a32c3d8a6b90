//! Candidate releases: listed by the package index (`pip index versions`), installed once
//! each into an overlay folder (`uv pip install --target`, hard links from uv's cache; pip
//! without uv) constrained to the versions the rest of the environment has.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::CliError;

use super::runner::{io, safe_name};

/// Finds a program: on PATH, or next to the interpreter (a virtual environment's `bin`).
pub(super) fn tool(name: &str, python: &Path) -> Option<PathBuf> {
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

pub(super) fn output(cmd: &mut Command) -> Result<(bool, String, String), CliError> {
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

/// What an overlay's completion mark says when the release has its own dependencies (an
/// empty mark: the environment's).
const OWN: &str = "own dependencies";

/// Installs releases into overlay folders.
pub(super) struct Installer {
    pub(super) python: PathBuf,
    pub(super) package: String,
    pub(super) uv: Option<PathBuf>,
    /// `name==version` of everything else installed: what a candidate must keep.
    pub(super) constraints: PathBuf,
    pub(super) cache: PathBuf,
    pub(super) python_tag: String,
}

impl Installer {
    pub(super) fn new(python: &Path, package: &str, work: &Path) -> Result<Installer, CliError> {
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
    pub(super) fn installed(&self) -> Option<String> {
        let code = format!(
            "import importlib.metadata as m; print(m.version({:?}))",
            self.package
        );
        let (ok, out, _) = output(Command::new(&self.python).args(["-c", &code])).ok()?;
        ok.then(|| out.trim().to_owned()).filter(|s| !s.is_empty())
    }

    /// Every release the package index lists for this Python.
    pub(super) fn listed(&self) -> Result<Vec<String>, CliError> {
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
    /// The bool: it was installed with its own dependencies (the environment's versions do not
    /// fit it).
    pub(super) fn overlay(&self, version: &str) -> Result<(PathBuf, bool), String> {
        let dir = self.cache.join(format!(
            "{}-{}-{}",
            safe_name(&self.package),
            safe_name(version),
            self.python_tag
        ));
        let done = dir.join(".gradsleuth-complete");
        if let Ok(mark) = std::fs::read_to_string(&done) {
            return Ok((dir, !mark.trim().is_empty()));
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
        let own = match attempt(true) {
            Ok(()) => false,
            Err(_) => match attempt(false) {
                Ok(()) => true,
                Err(e) => return Err(format!("cannot install {spec} for this Python: {e}")),
            },
        };
        let _ = std::fs::write(&done, if own { OWN } else { "" });
        Ok((dir, own))
    }
}
