//! `gradsleuth vscode [SCRIPT]`: VS Code set-up to debug a training script from Python down into
//! PyTorch's C++: `.vscode/launch.json` (a debugpy launch, a gdb attach to that process, the two
//! as a compound, a pure gdb launch of `python SCRIPT`), `.vscode/c_cpp_properties.json` and a
//! gdb command file. Existing files are JSON with comments: new entries are inserted into the
//! text, so the user's entries, comments and formatting stay exactly as they were.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::cmd::doctor::strip_jsonc;
use crate::CliError;

#[derive(clap::Args, Debug)]
pub struct VscodeArgs {
    /// The training script the configurations launch (default: train.py).
    #[arg(default_value = "train.py")]
    pub script: String,
    /// A PyTorch checkout to map the build's source paths to (`sourceFileMap`).
    #[arg(long, value_name = "DIR")]
    pub source: Option<PathBuf>,
    /// Print what would change, as a diff; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The folder holding `.vscode` (default: the current one).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,
}

/// Byte offset of the `[` of `"key": [` at the top level of the root object, skipping strings
/// and comments; and of the root object's closing `}`.
fn find(text: &str, key: &str) -> (Option<usize>, Option<usize>) {
    let b = text.as_bytes();
    let (mut i, mut depth) = (0, 0i32);
    let mut last_string: Option<(usize, usize)> = None;
    let (mut arr, mut root_end) = (None, None);
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                last_string = Some((start, i));
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'{' | b'[' => {
                if b[i] == b'[' && depth == 1 && arr.is_none() {
                    if let Some((s, e)) = last_string {
                        if &text[s..e] == key {
                            arr = Some(i);
                        }
                    }
                }
                depth += 1;
            }
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 && b[i] == b'}' {
                    root_end = Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    (arr, root_end)
}

/// The index of the `]` closing the array opened at `open`, and whether it has items.
fn array_end(text: &str, open: usize) -> Option<(usize, bool)> {
    let stripped_len = |s: &str| strip_jsonc(s).trim().len();
    let b = text.as_bytes();
    let (mut i, mut depth) = (open, 0i32);
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
            }
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some((i, stripped_len(&text[open + 1..i]) > 0));
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn indent(v: &Value, pad: &str) -> String {
    serde_json::to_string_pretty(v)
        .unwrap_or_default()
        .lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Adds `entries` (objects with a `name`) to the array `key` of a JSONC document, skipping
/// names already there; creates the array (or the document) when missing.
pub fn merge(text: Option<&str>, key: &str, entries: &[Value]) -> Result<String, String> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        let mut doc = serde_json::Map::new();
        if key == "configurations" {
            doc.insert("version".into(), json!("0.2.0"));
        }
        doc.insert(key.into(), Value::from(entries.to_vec()));
        return Ok(serde_json::to_string_pretty(&Value::Object(doc)).unwrap_or_default() + "\n");
    };
    let parsed: Value = serde_json::from_str(&strip_jsonc(text))
        .map_err(|e| format!("not JSON with comments: {e}"))?;
    let existing: Vec<&str> = parsed[key]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    let new: Vec<&Value> = entries
        .iter()
        .filter(|e| !existing.contains(&e["name"].as_str().unwrap_or("")))
        .collect();
    if new.is_empty() {
        return Ok(text.to_owned());
    }
    let body = new
        .iter()
        .map(|e| indent(e, "    "))
        .collect::<Vec<_>>()
        .join(",\n");
    let (arr, root_end) = find(text, key);
    match arr {
        Some(open) => {
            let (close, has_items) = array_end(text, open).ok_or("unbalanced brackets")?;
            // Just before `]`, after whatever the user has there (comments included).
            let trailing_comma = ends_with_comma(&text[open + 1..close]);
            let sep = if has_items && !trailing_comma {
                ","
            } else {
                ""
            };
            Ok(format!(
                "{}{sep}\n{body}\n  {}",
                text[..close].trim_end(),
                &text[close..]
            ))
        }
        None => {
            let end = root_end.ok_or("no top-level object")?;
            let before = text[..end].trim_end();
            let content = strip_comments(before);
            let content = content.trim_end();
            let sep = if content.ends_with('{') || content.ends_with(',') {
                ""
            } else {
                ","
            };
            Ok(format!(
                "{before}{sep}\n  \"{key}\": [\n{body}\n  ]\n{}",
                &text[end..]
            ))
        }
    }
}

/// The text without comments (strings kept, trailing commas kept).
fn strip_comments(text: &str) -> String {
    // strip_jsonc drops a comma followed by `}`/`]`; a sentinel keeps the prefix's last one.
    strip_jsonc(&format!("{text}\u{1}"))
        .trim_end_matches('\u{1}')
        .to_owned()
}

fn ends_with_comma(text: &str) -> bool {
    strip_comments(text).trim_end().ends_with(',')
}

fn setup_commands() -> Value {
    json!([
        {"description": "pretty printing", "text": "-enable-pretty-printing", "ignoreFailures": true},
        {"description": "torch loads its libraries late", "text": "set breakpoint pending on"},
        {"description": "PyTorch's threads signal each other", "text": "handle SIGUSR1 SIGUSR2 SIGPIPE nostop noprint pass"}
    ])
}

pub fn run(args: VscodeArgs) -> Result<i32, CliError> {
    let python = std::env::var("GRADSLEUTH_PYTHON").unwrap_or_else(|_| "python3".into());
    let dir = args.workspace.join(".vscode");
    let script = &args.script;
    let mut gdb_attach = json!({
        "name": "gradsleuth: gdb attach (native)", "type": "cppdbg", "request": "attach",
        "program": python, "processId": "${command:pickProcess}", "MIMode": "gdb",
        "setupCommands": setup_commands()
    });
    let mut gdb_launch = json!({
        "name": format!("gradsleuth: gdb launch python {script}"), "type": "cppdbg", "request": "launch",
        "program": python, "args": [script], "cwd": "${workspaceFolder}", "MIMode": "gdb",
        "setupCommands": setup_commands()
    });
    if let Some(src) = &args.source {
        let map = json!({"/__w/pytorch/pytorch": src.display().to_string()});
        gdb_attach["sourceFileMap"] = map.clone();
        gdb_launch["sourceFileMap"] = map;
    }
    let configs = vec![
        json!({
            "name": format!("gradsleuth: debugpy {script}"), "type": "debugpy", "request": "launch",
            "program": "${workspaceFolder}/".to_owned() + script, "console": "integratedTerminal",
            "justMyCode": false, "subProcess": true
        }),
        gdb_attach,
        gdb_launch,
    ];
    let compounds = vec![json!({
        "name": "gradsleuth: Python + native",
        "configurations": [format!("gradsleuth: debugpy {script}"), "gradsleuth: gdb attach (native)"]
    })];
    let torch_include = std::env::var("GRADSLEUTH_TORCH_DIR")
        .ok()
        .map(|d| PathBuf::from(d).join("include"));
    let compiler = ["/usr/bin/gcc-13", "/usr/bin/g++-13", "/usr/bin/gcc"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("/usr/bin/gcc");
    let mut includes = vec![json!("${workspaceFolder}/**")];
    if let Some(inc) = &torch_include {
        includes.push(json!(inc.display().to_string()));
        includes.push(json!(inc
            .join("torch/csrc/api/include")
            .display()
            .to_string()));
    }
    let cpp = vec![json!({
        "name": "gradsleuth: torch", "compilerPath": compiler, "cppStandard": "c++17",
        "includePath": includes
    })];
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let launch_old = read("launch.json");
    let mut launch = merge(launch_old.as_deref(), "configurations", &configs)
        .map_err(|e| CliError::Io(format!("{}: {e}", dir.join("launch.json").display())))?;
    launch = merge(Some(&launch), "compounds", &compounds)
        .map_err(|e| CliError::Io(format!("{}: {e}", dir.join("launch.json").display())))?;
    let cpp_old = read("c_cpp_properties.json");
    let cpp_new = merge(cpp_old.as_deref(), "configurations", &cpp).map_err(|e| {
        CliError::Io(format!(
            "{}: {e}",
            dir.join("c_cpp_properties.json").display()
        ))
    })?;
    let gdb_file = "# gdb commands for PyTorch (gdb -x .vscode/gradsleuth.gdb --args python train.py)\n\
set breakpoint pending on\nset pagination off\nhandle SIGUSR1 SIGUSR2 SIGPIPE nostop noprint pass\n\
# stop at any failing TORCH_CHECK or C++ throw:\n# break c10::detail::torchCheckFail\n# catch throw\n\
# `gradsleuth where torch.relu` prints the exact break lines for an op.\n\
# Python frames (py-bt): load Python's python3.X-gdb.py; `gradsleuth doctor` prints the line.\n";
    let files = [
        ("launch.json", launch_old, launch),
        ("c_cpp_properties.json", cpp_old, cpp_new),
        (
            "gradsleuth.gdb",
            read("gradsleuth.gdb"),
            gdb_file.to_owned(),
        ),
    ];
    for (name, old, new) in &files {
        let old = old.clone().unwrap_or_default();
        if &old == new {
            continue;
        }
        let path = dir.join(name);
        if args.dry_run {
            let diff = similar::TextDiff::from_lines(&old, new);
            print!(
                "{}",
                diff.unified_diff()
                    .header(&format!("a/.vscode/{name}"), &format!("b/.vscode/{name}"))
            );
        } else {
            std::fs::create_dir_all(&dir)
                .map_err(|e| CliError::Io(format!("cannot create {}: {e}", dir.display())))?;
            std::fs::write(&path, new)
                .map_err(|e| CliError::Io(format!("cannot write {}: {e}", path.display())))?;
            eprintln!("gradsleuth: wrote {}", path.display());
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = r#"{
    // my own settings, keep them
    "version": "0.2.0",
    "configurations": [
        {
            "name": "Train (mine)", // the one I use daily
            "type": "debugpy",
            "request": "launch",
            "program": "${workspaceFolder}/train.py",
        },
    ],
    /* trailing block comment */
}
"#;

    #[test]
    fn merging_keeps_the_users_text_and_adds_ours() {
        let entries = vec![json!({"name": "gradsleuth: x", "type": "cppdbg"})];
        let out = merge(Some(USER), "configurations", &entries).unwrap();
        assert!(out.contains("// my own settings, keep them"));
        assert!(out.contains("\"name\": \"Train (mine)\", // the one I use daily"));
        assert!(out.contains("/* trailing block comment */"));
        let v: Value = serde_json::from_str(&strip_jsonc(&out)).unwrap();
        let names: Vec<&str> = v["configurations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["Train (mine)", "gradsleuth: x"]);
        // Idempotent: a second run changes nothing.
        assert_eq!(merge(Some(&out), "configurations", &entries).unwrap(), out);
        // A new key is added to the root object.
        let with = merge(Some(&out), "compounds", &[json!({"name": "c"})]).unwrap();
        let v: Value = serde_json::from_str(&strip_jsonc(&with)).unwrap();
        assert_eq!(v["compounds"][0]["name"], "c");
        assert!(with.contains("// the one I use daily"));
    }

    #[test]
    fn malformed_files_are_errors_not_overwritten() {
        assert!(merge(
            Some("{ \"configurations\": [ {"),
            "configurations",
            &[json!({"name": "x"})]
        )
        .is_err());
        let fresh = merge(None, "configurations", &[json!({"name": "x"})]).unwrap();
        assert!(fresh.contains("\"version\": \"0.2.0\""));
    }
}
