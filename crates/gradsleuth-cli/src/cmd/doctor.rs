//! `gradsleuth doctor`: can this machine debug PyTorch's native code, and how? A checklist,
//! each item pass/warn/fail with the reason and the fix. Facts about torch come from a child
//! interpreter (the only part that imports torch); the libraries are read as ELF in Rust.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::{CliError, Format};

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// The Python whose torch to examine (default: the one gradsleuth runs in).
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// A PyTorch source checkout, to map the build's source paths to it.
    #[arg(long, value_name = "PYTORCH_CHECKOUT")]
    pub source: Option<PathBuf>,
    /// The training script (to check `.vscode/launch.json` against what it uses).
    #[arg(long, value_name = "SCRIPT")]
    pub script: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Serialize)]
struct Check {
    name: String,
    /// `pass`, `warn`, `fail`, `info`
    status: &'static str,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(name: &str, status: &'static str, detail: impl Into<String>, fix: Option<&str>) -> Check {
    Check {
        name: name.to_owned(),
        status,
        detail: detail.into(),
        fix: fix.map(str::to_owned),
    }
}

const PROBE: &str = r#"
import json, os, sys, importlib.util as u
out = {"python": sys.executable, "python_version": sys.version.split()[0], "prefix": sys.prefix, "base_prefix": sys.base_prefix}
out["debugpy"] = u.find_spec("debugpy") is not None
try:
    import torch
    out["torch"] = {
        "version": torch.__version__, "file": torch.__file__,
        "git": getattr(torch.version, "git_version", None), "cuda": torch.version.cuda,
        "debug": bool(getattr(torch.version, "debug", False)),
        "cudnn": (torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None),
        "config": torch.__config__.show(),
    }
except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"#;

fn version_of(cmd: &str, arg: &str) -> Option<String> {
    let out = Command::new(cmd).arg(arg).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_owned())
}

/// `.vscode/*.json` are JSON with comments: strip `//` and `/* */` outside strings.
pub fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b: Vec<char> = text.chars().collect();
    let (mut i, mut in_str) = (0, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            out.push(c);
            if c == '\\' && i + 1 < b.len() {
                out.push(b[i + 1]);
                i += 1;
            } else if c == '"' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
            out.push(c);
        } else if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
            continue;
        } else if c == '/' && b.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                i += 1;
            }
            i += 2;
            continue;
        } else {
            out.push(c);
        }
        i += 1;
    }
    // Trailing commas (allowed by VS Code) before } or ].
    let mut cleaned = String::with_capacity(out.len());
    let chars: Vec<char> = out.chars().collect();
    for (k, c) in chars.iter().enumerate() {
        if *c == ',' {
            let next = chars[k + 1..].iter().find(|x| !x.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                continue;
            }
        }
        cleaned.push(*c);
    }
    cleaned
}

pub fn run(args: DoctorArgs) -> Result<i32, CliError> {
    let python = args
        .python
        .clone()
        .or_else(|| std::env::var_os("GRADSLEUTH_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let probe = Command::new(&python)
        .args(["-c", PROBE])
        .output()
        .map_err(|e| {
            CliError::Usage(format!(
                "cannot run {}: {e} (use --python PY)",
                python.display()
            ))
        })?;
    let facts: serde_json::Value = serde_json::from_slice(&probe.stdout).map_err(|_| {
        CliError::Io(format!(
            "{} could not report on its torch: {}",
            python.display(),
            String::from_utf8_lossy(&probe.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ))
    })?;
    let mut checks = Vec::new();
    let Some(torch) = facts.get("torch") else {
        let err = facts
            .get("torch_error")
            .and_then(|e| e.as_str())
            .unwrap_or("not installed");
        checks.push(check(
            "torch",
            "fail",
            format!("{} cannot import torch: {err}", python.display()),
            Some("pip install torch (or point --python at the environment that has it)"),
        ));
        emit(&checks, args.format);
        return Ok(1);
    };
    let s = |k: &str| {
        torch
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let file = PathBuf::from(s("file"));
    let torch_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let editable = !torch_dir
        .components()
        .any(|c| c.as_os_str() == "site-packages" || c.as_os_str() == "dist-packages");
    let config = s("config");
    let build_type = config
        .split("BUILD_TYPE=")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or("?")
        .to_owned();
    checks.push(check(
        "torch",
        "info",
        format!(
            "torch {} from {} ({}), git {}, CUDA {}, cuDNN {}, build type {build_type}{}",
            s("version"),
            torch_dir.display(),
            if editable {
                "a source tree (develop/editable install)"
            } else {
                "a wheel in site-packages"
            },
            s("git"),
            torch.get("cuda").and_then(|v| v.as_str()).unwrap_or("none"),
            torch.get("cudnn").map_or("none".into(), |v| v.to_string()),
            if torch.get("debug").and_then(|v| v.as_bool()) == Some(true) {
                " (debug build)"
            } else {
                ""
            }
        ),
        None,
    ));
    // The libraries a debugger loads.
    let mut libs: Vec<PathBuf> = vec![
        torch_dir.join("lib/libtorch_cpu.so"),
        torch_dir.join("lib/libtorch_python.so"),
    ];
    if let Ok(rd) = std::fs::read_dir(&torch_dir) {
        libs.extend(rd.flatten().map(|e| e.path()).filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("_C") && n.ends_with(".so"))
        }));
    }
    let cuda = torch_dir.join("lib/libtorch_cuda.so");
    if cuda.exists() {
        libs.push(cuda);
    }
    let mut compiler = None;
    for lib in &libs {
        let name = lib
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match gradsleuth_native::elf_info(lib) {
            Ok(info) => {
                if compiler.is_none() {
                    compiler = gradsleuth_native::gcc_version(&info.compilers);
                }
                let (status, detail) = match (info.dwarf, info.symbols) {
                    (true, _) => ("pass", "DWARF debug info: line-level breakpoints and source in backtraces".to_owned()),
                    (false, true) => ("warn", "symbols, no DWARF: breakpoints by function name and backtraces, no source lines".to_owned()),
                    (false, false) => ("fail", "stripped: no symbols, no debug info".to_owned()),
                };
                checks.push(check(
                    &name,
                    status,
                    detail,
                    (!info.dwarf).then_some(
                        "for line level, build from source with REL_WITH_DEB_INFO=1 (hours, tens of GB) or, cheaper, debug info for chosen files only: USE_CUSTOM_DEBINFO=\"aten/src/ATen/native/Activation.cpp\" (tools/build_with_debinfo.py); DEBUG=1 also disables optimizations",
                    ),
                ));
            }
            Err(e) => checks.push(check(
                &name,
                "fail",
                e.to_string(),
                Some("reinstall torch (the file is damaged)"),
            )),
        }
    }
    // Compiler: .comment and torch's own config, against the editor's.
    let config_gcc = config
        .split("- GCC ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .map(str::trim)
        .map(str::to_owned);
    let vscode_cc = std::fs::read_to_string(".vscode/c_cpp_properties.json")
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&strip_jsonc(&t)).ok())
        .and_then(|v| {
            v["configurations"][0]["compilerPath"]
                .as_str()
                .map(str::to_owned)
        });
    let local_gcc = version_of("gcc", "-dumpfullversion");
    checks.push(check(
        "compiler",
        match (&compiler, &local_gcc) {
            (Some(a), Some(b)) if a.split('.').next() == b.split('.').next() => "pass",
            (Some(_), Some(_)) => "warn",
            _ => "info",
        },
        format!(
            "torch was built with GCC {} (ELF .comment; torch.__config__: GCC {}); this machine's gcc: {}; .vscode/c_cpp_properties.json compilerPath: {}",
            compiler.as_deref().unwrap_or("?"),
            config_gcc.as_deref().unwrap_or("?"),
            local_gcc.as_deref().unwrap_or("none"),
            vscode_cc.as_deref().unwrap_or("not set")
        ),
        Some("IntelliSense and ABI-sensitive builds of extensions want the same major GCC as torch"),
    ));
    // Source mapping.
    let git = s("git");
    if let Some(src) = &args.source {
        let head = Command::new("git")
            .arg("-C")
            .arg(src)
            .args(["rev-parse", "HEAD"])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        let same = head.as_deref() == Some(git.as_str());
        checks.push(check(
            "source",
            if same { "pass" } else { "warn" },
            format!("{} is at {}, torch was built from {git}", src.display(), head.as_deref().unwrap_or("? (not a git checkout)")),
            Some(&format!(
                "git -C {} checkout {git}; in gdb: set substitute-path /__w/pytorch/pytorch {} and directory {}",
                src.display(),
                src.display(),
                src.display()
            )),
        ));
    } else {
        checks.push(check("source", "info", format!("no checkout given; the build's sources were at /__w/pytorch/pytorch, commit {git}"), Some("git clone https://github.com/pytorch/pytorch && git checkout <commit>, then gradsleuth doctor --source DIR")));
    }
    // Debuggers.
    for (tool, why) in [
        ("gdb", "native breakpoints and backtraces"),
        ("lldb", "alternative to gdb"),
        ("cuda-gdb", "CUDA kernels (with cuda-gdbserver for remote)"),
    ] {
        match version_of(tool, "--version") {
            Some(v) => checks.push(check(tool, "pass", v, None)),
            None => checks.push(check(
                tool,
                if tool == "gdb" { "fail" } else { "info" },
                format!("not found ({why})"),
                (tool == "gdb").then_some("apt-get install gdb"),
            )),
        }
    }
    let gdb_py = Command::new("gdb")
        .args(["-batch", "-nx", "-ex", "python print('py-ok')"])
        .output()
        .ok()
        .is_some_and(|o| String::from_utf8_lossy(&o.stdout).contains("py-ok"));
    let prefix = facts.get("prefix").and_then(|v| v.as_str()).unwrap_or("");
    let ver = facts
        .get("python_version")
        .and_then(|v| v.as_str())
        .unwrap_or("3");
    let short: String = ver.split('.').take(2).collect::<Vec<_>>().join(".");
    let base = facts
        .get("base_prefix")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let gdb_helper = [prefix, base]
        .iter()
        .flat_map(|p| {
            [
                format!("{p}/bin/python{short}-gdb.py"),
                format!("{p}/lib/python{short}-gdb.py"),
            ]
        })
        .find(|p| Path::new(p).exists());
    checks.push(check(
        "py-bt",
        if gdb_py && gdb_helper.is_some() { "pass" } else { "warn" },
        format!("gdb Python scripting: {}; Python's gdb helpers (py-bt): {}", if gdb_py { "yes" } else { "no" }, gdb_helper.as_deref().unwrap_or("not found")),
        gdb_helper.as_ref().map(|h| format!("gdb -iex \"add-auto-load-safe-path {h}\" -iex \"source {h}\" --args python train.py")).as_deref(),
    ));
    let ptrace = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .map(|s| s.trim().to_owned());
    checks.push(match ptrace.as_deref() {
        None | Some("0") => check("ptrace", "pass", format!("ptrace_scope {}: a debugger can attach to a running training process", ptrace.as_deref().unwrap_or("absent (no Yama)")), None),
        Some(v) => check("ptrace", "warn", format!("ptrace_scope {v}: attaching to a running process needs root or a launch under the debugger"), Some("sudo sysctl kernel.yama.ptrace_scope=0")),
    });
    let debugpy = facts.get("debugpy").and_then(|v| v.as_bool()) == Some(true);
    checks.push(check(
        "debugpy",
        if debugpy { "pass" } else { "warn" },
        if debugpy {
            "installed"
        } else {
            "not installed (VS Code's Python debugger)"
        },
        (!debugpy).then_some("pip install debugpy"),
    ));
    // Environment variables.
    for (var, what) in [
        (
            "CUDA_LAUNCH_BLOCKING",
            "1: CUDA errors raised at the failing kernel's launch, not later (slow)",
        ),
        (
            "TORCH_SHOW_CPP_STACKTRACES",
            "1: C++ stack traces in PyTorch's error messages",
        ),
        (
            "TORCH_USE_CUDA_DSA",
            "1: device-side assertions (needs a build with them)",
        ),
        (
            "PYTORCH_ALLOC_CONF",
            "CUDA caching allocator settings (PYTORCH_CUDA_ALLOC_CONF still works)",
        ),
    ] {
        let v = std::env::var(var).ok();
        checks.push(check(
            var,
            "info",
            format!("{} — {what}", v.map_or("unset".into(), |v| format!("={v}"))),
            None,
        ));
    }
    // An existing launch.json.
    if let Ok(text) = std::fs::read_to_string(".vscode/launch.json") {
        match serde_json::from_str::<serde_json::Value>(&strip_jsonc(&text)) {
            Ok(v) => {
                let workers = args
                    .script
                    .as_ref()
                    .and_then(|s| std::fs::read_to_string(s).ok())
                    .is_some_and(|t| t.contains("num_workers") && !t.contains("num_workers=0"));
                for c in v["configurations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["type"] == "debugpy" || c["type"] == "python")
                {
                    let name = c["name"].as_str().unwrap_or("?");
                    let jmc = c["justMyCode"].as_bool().unwrap_or(true);
                    checks.push(check(
                        &format!("launch.json: {name}"),
                        if jmc { "warn" } else { "pass" },
                        format!("justMyCode {jmc}{}", if workers { format!(", subProcess {} (the script uses DataLoader workers: those are the subprocesses)", c["subProcess"].as_bool().unwrap_or(true)) } else { String::new() }),
                        jmc.then_some("set \"justMyCode\": false to step into torch's Python code"),
                    ));
                }
            }
            Err(e) => checks.push(check(
                ".vscode/launch.json",
                "fail",
                format!("not readable as JSON with comments: {e}"),
                Some("fix the syntax (gradsleuth vscode can write a fresh one)"),
            )),
        }
    }
    emit(&checks, args.format);
    Ok(i32::from(checks.iter().any(|c| c.status == "fail")))
}

fn emit(checks: &[Check], format: Format) {
    let mut out = anstream::stdout();
    if format == Format::Json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::json!({ "command": "doctor", "checks": checks })
        );
        return;
    }
    for c in checks {
        let mark = match c.status {
            "pass" => "✓",
            "warn" => "!",
            "fail" => "✗",
            _ => "·",
        };
        let _ = writeln!(out, "{mark} {:<24} {}", c.name, c.detail);
        if let Some(f) = &c.fix {
            let _ = writeln!(out, "  {:<24} fix: {f}", "");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn jsonc_comments_and_trailing_commas() {
        let text =
            "{\n  // a comment\n  \"url\": \"http://x//y\", /* block */\n  \"a\": [1, 2,],\n}\n";
        let v: serde_json::Value = serde_json::from_str(&super::strip_jsonc(text)).unwrap();
        assert_eq!(v["url"], "http://x//y");
        assert_eq!(v["a"], serde_json::json!([1, 2]));
    }
}
