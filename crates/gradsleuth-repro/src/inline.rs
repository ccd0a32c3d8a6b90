//! Local modules pasted into the script, so the reduced program stands alone: a top-level
//! `from helpers import Net, train as fit` whose module is a file next to the script is
//! replaced by that file's code (its `if __name__ == "__main__":` block and `from __future__`
//! imports left out) and `fit = train` for each alias. Repeated for the modules those import;
//! a module is pasted once.

use std::collections::HashSet;
use std::path::Path;

use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::Ranged;

/// The script with its local `from MODULE import ...` statements inlined, and the modules
/// inlined; None when there is nothing to inline (or the source does not parse).
pub fn inline_local_imports(source: &str, dir: &Path) -> Option<(String, Vec<String>)> {
    let mut done: Vec<String> = Vec::new();
    let mut current = source.to_owned();
    for _ in 0..8 {
        match inline_once(&current, dir, &mut done) {
            Some(next) => current = next,
            None => break,
        }
    }
    (!done.is_empty()).then_some((current, done))
}

fn is_main_guard(s: &Stmt) -> bool {
    let Stmt::If(i) = s else { return false };
    let Expr::Compare(c) = i.test.as_ref() else {
        return false;
    };
    matches!(c.left.as_ref(), Expr::Name(n) if n.id.as_str() == "__name__")
}

/// The module's code to paste: without its main guard and `from __future__` imports.
fn pasteable(module: &str) -> Option<String> {
    let parsed = ruff_python_parser::parse_module(module).ok()?;
    let mut out = String::new();
    for s in &parsed.syntax().body {
        let skip = is_main_guard(s)
            || matches!(s, Stmt::ImportFrom(f) if f.module.as_ref().is_some_and(|m| m.as_str() == "__future__"));
        if !skip {
            out.push_str(&module[s.range()]);
            out.push('\n');
        }
    }
    Some(out)
}

fn inline_once(source: &str, dir: &Path, done: &mut Vec<String>) -> Option<String> {
    let parsed = ruff_python_parser::parse_module(source).ok()?;
    let seen: HashSet<&str> = done.iter().map(String::as_str).collect();
    for s in &parsed.syntax().body {
        let Stmt::ImportFrom(f) = s else { continue };
        let Some(module) = f.module.as_ref().map(|m| m.as_str().to_owned()) else {
            continue;
        };
        if f.level != 0 || module.contains('.') {
            continue;
        }
        let file = dir.join(format!("{module}.py"));
        if !file.is_file() {
            continue;
        }
        let mut text = String::new();
        if !seen.contains(module.as_str()) {
            let code = std::fs::read_to_string(&file).ok()?;
            text.push_str(&format!("# --- from {module}.py ---\n"));
            text.push_str(&pasteable(&code)?);
            text.push_str(&format!("# --- end of {module}.py ---\n"));
        }
        for alias in &f.names {
            if let Some(as_name) = &alias.asname {
                if alias.name.as_str() != "*" {
                    text.push_str(&format!("{} = {}\n", as_name.as_str(), alias.name.as_str()));
                }
            }
        }
        let range = s.range();
        let mut out = String::with_capacity(source.len() + text.len());
        out.push_str(&source[..range.start().to_usize()]);
        out.push_str(text.trim_end_matches('\n'));
        if text.is_empty() {
            out.push_str("pass");
        }
        out.push_str(&source[range.end().to_usize()..]);
        if !seen.contains(module.as_str()) {
            done.push(module);
        }
        return Some(out);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pastes_local_modules_once_with_their_aliases() {
        let dir = tempfile_dir();
        std::fs::write(
            dir.join("models.py"),
            "from __future__ import annotations\nimport torch\nfrom layers import Block\n\nclass Net(torch.nn.Module):\n    pass\n\nif __name__ == \"__main__\":\n    Net()\n",
        )
        .unwrap();
        std::fs::write(dir.join("layers.py"), "class Block:\n    pass\n").unwrap();
        let src = "import torch\nfrom models import Net as Model\nfrom models import Net\nfrom torch import nn\nm = Model()\n";
        let (out, done) = inline_local_imports(src, &dir).unwrap();
        assert_eq!(done, ["models", "layers"]);
        assert!(
            out.contains("class Net(torch.nn.Module)") && out.contains("Model = Net"),
            "{out}"
        );
        assert!(
            out.contains("class Block:") && !out.contains("from layers import"),
            "{out}"
        );
        assert!(
            !out.contains("__future__") && !out.contains("__main__"),
            "{out}"
        );
        assert_eq!(out.matches("class Net").count(), 1, "{out}");
        assert!(out.contains("from torch import nn"));
        assert!(ruff_python_parser::parse_module(&out).is_ok(), "{out}");
        assert!(inline_local_imports("import torch\n", &dir).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("gradsleuth-inline-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
