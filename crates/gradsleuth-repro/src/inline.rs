//! Local modules pasted into the script, so the reduced program stands alone: a top-level
//! `from helpers import Net, train as fit` whose module is a file next to the script is
//! replaced by that file's code (its `if __name__ == "__main__":` block and `from __future__`
//! imports left out) and `fit = train` for each alias; `import helpers` (or `as h`) by the
//! code and a namespace of the names it defines (`helpers = SimpleNamespace(Net=Net, ...)`), so
//! `helpers.Net` still resolves. Packages too: `from models.resnet import ResNet` pastes
//! `models/resnet.py`, `from models import ResNet` the package's `__init__.py`, `from models
//! import resnet` (a submodule) becomes `import models.resnet as resnet`; a pasted module's
//! relative imports (`from .layers import Block`) are made absolute first, from the package it
//! was in. Repeated for the modules those import; a module is pasted once.

use std::collections::HashSet;
use std::path::Path;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::Ranged;

/// The script with its local `from MODULE import ...` statements inlined, and the modules
/// inlined; None when there is nothing to inline (or the source does not parse).
pub fn inline_local_imports(source: &str, dir: &Path) -> Option<(String, Vec<String>)> {
    let mut done: Vec<String> = Vec::new();
    let mut current = source.to_owned();
    for _ in 0..64 {
        match inline_once(&current, dir, &mut done) {
            Some(next) => current = next,
            None => break,
        }
    }
    (!done.is_empty()).then_some((current, done))
}

/// The installed modules a script imports at top level, not the local modules next to it:
/// what a fork server can import once for every candidate. Each module whole (`import
/// transformers.models.albert` is `transformers.models.albert`, whose import is most of the
/// cost, not only `transformers`), and each name imported from one as `module:name`
/// (`transformers:AlbertConfig`: a lazily loaded package imports the name's module on access).
pub fn installed_imports(source: &str, dir: &Path) -> Vec<String> {
    let Ok(parsed) = ruff_python_parser::parse_module(source) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    let mut add = |module: &str, names: &[&str]| {
        let top = module.split('.').next().unwrap_or(module);
        let local = dir.join(format!("{top}.py")).exists() || dir.join(top).is_dir();
        if top.is_empty() || top == "__future__" || local {
            return;
        }
        let wanted = std::iter::once(module.to_owned()).chain(
            names
                .iter()
                .filter(|n| **n != "*")
                .map(|n| format!("{module}:{n}")),
        );
        for m in wanted {
            if !out.contains(&m) {
                out.push(m);
            }
        }
    };
    for s in &parsed.syntax().body {
        match s {
            Stmt::Import(i) => i.names.iter().for_each(|a| add(a.name.as_str(), &[])),
            Stmt::ImportFrom(f) if f.level == 0 => {
                if let Some(m) = &f.module {
                    let names: Vec<&str> = f.names.iter().map(|a| a.name.as_str()).collect();
                    add(m.as_str(), &names);
                }
            }
            _ => {}
        }
    }
    out
}

/// Entries of `dir` (the script's folder) the program still needs beside it: a file a string
/// literal names (`"beit.py"` loaded through `importlib`, `"config.yaml"`, `"data/x.pt"`: its
/// first component), and a local module or package an import that was not pasted in names.
/// Sorted, each once; hidden entries and `__pycache__` never.
pub fn local_files(source: &str, dir: &Path) -> Vec<String> {
    /// Names, and whether an import (not a string) named them.
    struct Names(Vec<(String, bool)>);
    impl<'a> Visitor<'a> for Names {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::StringLiteral(s) = e {
                let text = s.value.to_str();
                let first = text
                    .trim_start_matches("./")
                    .split('/')
                    .next()
                    .unwrap_or("");
                self.0.push((first.to_owned(), false));
            }
            visitor::walk_expr(self, e);
        }
        fn visit_stmt(&mut self, s: &'a Stmt) {
            let module = |m: &str| m.split('.').next().unwrap_or("").to_owned();
            match s {
                Stmt::Import(i) => {
                    for a in &i.names {
                        self.0.push((module(a.name.as_str()), true));
                    }
                }
                Stmt::ImportFrom(f) if f.level == 0 => {
                    if let Some(m) = &f.module {
                        self.0.push((module(m.as_str()), true));
                    }
                }
                _ => {}
            }
            visitor::walk_stmt(self, s);
        }
    }
    let Ok(parsed) = ruff_python_parser::parse_module(source) else {
        return Vec::new();
    };
    let mut names = Names(Vec::new());
    for s in &parsed.syntax().body {
        names.visit_stmt(s);
    }
    let plain = |n: &str| {
        !n.is_empty() && !n.starts_with('.') && n != "__pycache__" && !n.contains(['/', '\\'])
    };
    let mut out: Vec<String> = Vec::new();
    for (name, imported) in names.0 {
        if !plain(&name) {
            continue;
        }
        let found = if imported {
            // A module file, or a folder of Python files (a package); an import `data` does
            // not name a dataset folder `data/`.
            let file = format!("{name}.py");
            if dir.join(&file).is_file() {
                Some(file)
            } else if std::fs::read_dir(dir.join(&name)).is_ok_and(|mut d| {
                d.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "py")))
            }) {
                Some(name)
            } else {
                None
            }
        } else {
            dir.join(&name).exists().then_some(name)
        };
        if let Some(f) = found {
            out.push(f);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The file of local module `module` (dotted) under `dir`, and whether it is a package's
/// `__init__.py`.
fn module_file(dir: &Path, module: &str) -> Option<(std::path::PathBuf, bool)> {
    if module.is_empty() || module.split('.').any(|p| p.is_empty()) {
        return None;
    }
    let path = dir.join(module.replace('.', "/"));
    let file = path.with_extension("py");
    if file.is_file() {
        return Some((file, false));
    }
    let init = path.join("__init__.py");
    init.is_file().then_some((init, true))
}

/// The module's code read from `dir`, its relative imports made absolute (see
/// [`absolutize`]).
fn module_code(dir: &Path, module: &str) -> Option<String> {
    let (file, package) = module_file(dir, module)?;
    let code = std::fs::read_to_string(file).ok()?;
    let pkg = if package {
        module
    } else {
        module.rsplit_once('.').map_or("", |(p, _)| p)
    };
    Some(absolutize(&code, pkg))
}

/// `code` (a module of package `package`, `""` for a top-level module) with each relative
/// import, at any depth, rewritten as the absolute one it means: in `models/resnet.py`,
/// `from .layers import Block` is `from models.layers import Block` and `from .. import x`
/// from `models/sub/m.py` is `from models import x`. One that climbs above the top is left.
fn absolutize(code: &str, package: &str) -> String {
    struct Relative<'a>(Vec<&'a ruff_python_ast::StmtImportFrom>);
    impl<'a> Visitor<'a> for Relative<'a> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if let Stmt::ImportFrom(f) = s {
                if f.level > 0 {
                    self.0.push(f);
                }
            }
            visitor::walk_stmt(self, s);
        }
    }
    let Ok(parsed) = ruff_python_parser::parse_module(code) else {
        return code.to_owned();
    };
    let mut found = Relative(Vec::new());
    for s in &parsed.syntax().body {
        found.visit_stmt(s);
    }
    let parts: Vec<&str> = package.split('.').filter(|p| !p.is_empty()).collect();
    let mut out = code.to_owned();
    // From the last, so earlier ranges stay valid.
    for f in found.0.iter().rev() {
        let up = f.level as usize - 1;
        if up >= parts.len() {
            continue;
        }
        let mut base = parts[..parts.len() - up].join(".");
        if let Some(m) = &f.module {
            base = format!("{base}.{}", m.as_str());
        }
        let r = f.range();
        out.replace_range(
            r.start().to_usize()..r.end().to_usize(),
            &format!("from {base} import {}", aliases(f.names.iter())),
        );
    }
    out
}

/// `a as b, c`: an import's names as source.
fn aliases<'a>(names: impl Iterator<Item = &'a ruff_python_ast::Alias>) -> String {
    names
        .map(|a| match &a.asname {
            Some(n) => format!("{} as {}", a.name.as_str(), n.as_str()),
            None => a.name.as_str().to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn is_main_guard(s: &Stmt) -> bool {
    let Stmt::If(i) = s else { return false };
    let Expr::Compare(c) = i.test.as_ref() else {
        return false;
    };
    matches!(c.left.as_ref(), Expr::Name(n) if n.id.as_str() == "__name__")
}

/// A pasted module's file as the comments around it name it (`models/resnet.py`).
fn shown(dir: &Path, module: &str) -> String {
    module_file(dir, module)
        .and_then(|(f, _)| {
            f.strip_prefix(dir)
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| format!("{module}.py"))
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

/// The names a module's top level binds (definitions, plain assignments, imports).
fn defined(module: &str) -> Vec<String> {
    let Ok(parsed) = ruff_python_parser::parse_module(module) else {
        return Vec::new();
    };
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: &str| {
        if !n.starts_with("__") && !names.iter().any(|x| x == n) {
            names.push(n.to_owned());
        }
    };
    for s in &parsed.syntax().body {
        match s {
            Stmt::FunctionDef(f) => add(f.name.as_str()),
            Stmt::ClassDef(c) => add(c.name.as_str()),
            Stmt::Assign(a) => {
                for t in &a.targets {
                    if let Expr::Name(n) = t {
                        add(n.id.as_str());
                    }
                }
            }
            Stmt::AnnAssign(a) => {
                if let Expr::Name(n) = a.target.as_ref() {
                    add(n.id.as_str());
                }
            }
            Stmt::Import(i) => {
                for a in &i.names {
                    let bound = a.asname.as_ref().map_or_else(
                        || a.name.as_str().split('.').next().unwrap_or("").to_owned(),
                        |n| n.as_str().to_owned(),
                    );
                    add(&bound);
                }
            }
            Stmt::ImportFrom(f) if f.module.as_ref().is_none_or(|m| m.as_str() != "__future__") => {
                for a in &f.names {
                    if a.name.as_str() != "*" {
                        add(a.asname.as_ref().map_or(a.name.as_str(), |n| n.as_str()));
                    }
                }
            }
            _ => {}
        }
    }
    names
}

/// `import helpers` / `import helpers as h` of a local module: the module's code and a
/// namespace bound to the imported name.
fn inline_import(source: &str, s: &Stmt, dir: &Path, done: &mut Vec<String>) -> Option<String> {
    let Stmt::Import(i) = s else { return None };
    // One module per statement: `import a, b` stays as it is.
    let [alias] = i.names.as_slice() else {
        return None;
    };
    let module = alias.name.as_str();
    // `import models.resnet` binds `models`, not the module: left as it is (the kit carries
    // the package); `import models.resnet as resnet` is pasted.
    if module.contains('.') && alias.asname.is_none() {
        return None;
    }
    let code = module_code(dir, module)?;
    let bound = alias.asname.as_ref().map_or(module, |n| n.as_str());
    let mut text = String::new();
    if !done.iter().any(|d| d == module) {
        text.push_str(&format!("# --- from {} ---\n", shown(dir, module)));
        text.push_str(&pasteable(&code)?);
        text.push_str(&format!("# --- end of {} ---\n", shown(dir, module)));
    }
    let fields: Vec<String> = defined(&code).iter().map(|n| format!("{n}={n}")).collect();
    text.push_str(&format!(
        "import types as _types\n{bound} = _types.SimpleNamespace({})\n",
        fields.join(", ")
    ));
    let range = s.range();
    let out = format!(
        "{}{}{}",
        &source[..range.start().to_usize()],
        text.trim_end_matches('\n'),
        &source[range.end().to_usize()..]
    );
    if !done.iter().any(|d| d == module) {
        done.push(module.to_owned());
    }
    Some(out)
}

fn inline_once(source: &str, dir: &Path, done: &mut Vec<String>) -> Option<String> {
    let parsed = ruff_python_parser::parse_module(source).ok()?;
    for s in &parsed.syntax().body {
        if let Some(out) = inline_import(source, s, dir, done) {
            return Some(out);
        }
    }
    let seen: HashSet<&str> = done.iter().map(String::as_str).collect();
    for s in &parsed.syntax().body {
        let Stmt::ImportFrom(f) = s else { continue };
        let Some(module) = f.module.as_ref().map(|m| m.as_str().to_owned()) else {
            continue;
        };
        if f.level != 0 {
            continue;
        }
        let Some((_, package)) = module_file(dir, &module) else {
            continue;
        };
        let range = s.range();
        // Names that are submodules of a package are imported as modules: `from models import
        // resnet` is `import models.resnet as resnet` (pasted next), the rest stays a `from`.
        if package {
            let (subs, rest): (Vec<_>, Vec<_>) = f.names.iter().partition(|a| {
                a.name.as_str() != "*"
                    && module_file(dir, &format!("{module}.{}", a.name.as_str())).is_some()
            });
            if !subs.is_empty() {
                let mut lines: Vec<String> = subs
                    .iter()
                    .map(|a| {
                        let bound = a.asname.as_ref().unwrap_or(&a.name);
                        format!("import {module}.{} as {}", a.name.as_str(), bound.as_str())
                    })
                    .collect();
                if !rest.is_empty() {
                    lines.push(format!(
                        "from {module} import {}",
                        aliases(rest.into_iter())
                    ));
                }
                return Some(format!(
                    "{}{}{}",
                    &source[..range.start().to_usize()],
                    lines.join("\n"),
                    &source[range.end().to_usize()..]
                ));
            }
        }
        let mut text = String::new();
        if !seen.contains(module.as_str()) {
            let code = module_code(dir, &module)?;
            text.push_str(&format!("# --- from {} ---\n", shown(dir, &module)));
            text.push_str(&pasteable(&code)?);
            text.push_str(&format!("# --- end of {} ---\n", shown(dir, &module)));
        }
        for alias in &f.names {
            if let Some(as_name) = &alias.asname {
                if alias.name.as_str() != "*" {
                    text.push_str(&format!("{} = {}\n", as_name.as_str(), alias.name.as_str()));
                }
            }
        }
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
    fn installed_imports_leave_out_local_modules() {
        let dir = tempfile_dir("installed");
        std::fs::write(dir.join("helpers.py"), "x = 1\n").unwrap();
        let src = "from __future__ import annotations\nimport torch.nn as nn, os\nfrom transformers import AutoModel\nfrom helpers import x\nfrom . import y\nimport torch\nimport transformers.models.albert\n";
        assert_eq!(
            installed_imports(src, &dir),
            vec![
                "torch.nn",
                "os",
                "transformers",
                "transformers:AutoModel",
                "torch",
                "transformers.models.albert"
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pastes_local_modules_once_with_their_aliases() {
        let dir = tempfile_dir("from");
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

    #[test]
    fn an_imported_module_becomes_a_namespace_of_what_it_defines() {
        let dir = tempfile_dir("ns");
        std::fs::write(
            dir.join("helpers.py"),
            "import torch\nfrom torch import nn as tnn\nSCALE: float = 2.0\ndef make():\n    return tnn.Linear(2, 2)\nclass Box:\n    pass\n",
        )
        .unwrap();
        let src = "import torch\nimport helpers as h\nm = h.make()\n";
        let (out, done) = inline_local_imports(src, &dir).unwrap();
        assert_eq!(done, ["helpers"]);
        assert!(
            out.contains(
                "h = _types.SimpleNamespace(torch=torch, tnn=tnn, SCALE=SCALE, make=make, Box=Box)"
            ),
            "{out}"
        );
        assert!(
            out.contains("def make():") && !out.contains("import helpers"),
            "{out}"
        );
        assert!(ruff_python_parser::parse_module(&out).is_ok(), "{out}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn packages_and_their_relative_imports_are_pasted() {
        let dir = tempfile_dir("pkg");
        std::fs::create_dir_all(dir.join("models/blocks")).unwrap();
        std::fs::write(
            dir.join("models/__init__.py"),
            "from .resnet import ResNet\nfrom . import utils\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("models/resnet.py"),
            "import torch\nfrom .blocks.conv import (\n    Conv,\n)\nfrom .utils import scale as sc\n\nclass ResNet(torch.nn.Module):\n    def f(self):\n        from .utils import scale\n        return Conv(), sc, scale\n",
        )
        .unwrap();
        std::fs::write(dir.join("models/utils.py"), "scale = 2.0\n").unwrap();
        std::fs::write(dir.join("models/blocks/__init__.py"), "").unwrap();
        std::fs::write(
            dir.join("models/blocks/conv.py"),
            "from ..utils import scale\nclass Conv:\n    pass\n",
        )
        .unwrap();
        let src = "import torch\nfrom models import ResNet, utils as u\nfrom models.blocks import conv\nm = ResNet()\n";
        let (out, done) = inline_local_imports(src, &dir).unwrap();
        for m in [
            "models",
            "models.resnet",
            "models.blocks.conv",
            "models.utils",
        ] {
            assert!(done.contains(&m.to_owned()), "{m}: {done:?}\n{out}");
        }
        assert!(out.contains("# --- from models/resnet.py ---"), "{out}");
        assert_eq!(out.matches("class ResNet").count(), 1, "{out}");
        assert_eq!(out.matches("class Conv:").count(), 1, "{out}");
        assert_eq!(out.matches("scale = 2.0").count(), 1, "{out}");
        assert!(
            out.contains("sc = scale") && out.contains("conv = _types.SimpleNamespace("),
            "{out}"
        );
        assert!(
            out.contains("u = _types.SimpleNamespace(scale=scale)"),
            "{out}"
        );
        // An import inside a function stays an import, made absolute.
        assert!(
            out.contains("        from models.utils import scale\n"),
            "{out}"
        );
        assert!(!out.contains("from ."), "{out}");
        assert!(ruff_python_parser::parse_module(&out).is_ok(), "{out}");
        // `import models.resnet` binds `models`: left to the kit.
        assert!(inline_local_imports("import models.resnet\n", &dir).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn relative_imports_are_made_absolute_from_their_package() {
        assert_eq!(
            absolutize(
                "from .a import b as c, d\nfrom .. import e\nfrom ... import f\n",
                "p.q"
            ),
            "from p.q.a import b as c, d\nfrom p import e\nfrom ... import f\n"
        );
        assert_eq!(absolutize("from . import x\n", ""), "from . import x\n");
    }

    #[test]
    fn local_files_are_what_strings_and_unpasted_imports_name() {
        let dir = tempfile_dir("files");
        std::fs::write(dir.join("beit.py"), "x = 1\n").unwrap();
        std::fs::write(dir.join("config.yaml"), "a: 1\n").unwrap();
        std::fs::write(dir.join("unrelated.py"), "y = 2\n").unwrap();
        std::fs::create_dir_all(dir.join("pkg")).unwrap();
        std::fs::write(dir.join("pkg/__init__.py"), "").unwrap();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("data/train.pt"), "").unwrap();
        let src = "import os, torch\nfrom pkg.layers import Block\nimport data\n\
                   path = os.path.join(os.path.dirname(__file__), 'beit.py')\n\
                   cfg = open('./config.yaml').read()\nmissing = 'nothing.txt'\n";
        assert_eq!(local_files(src, &dir), ["beit.py", "config.yaml", "pkg"]);
        // A string naming a folder brings the folder; a relative import is not resolved here.
        assert_eq!(
            local_files(
                "x = torch.load('data/train.pt')\nfrom . import beit\n",
                &dir
            ),
            ["data"]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("gradsleuth-inline-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
