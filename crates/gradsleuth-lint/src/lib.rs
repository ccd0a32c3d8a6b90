//! `gradsleuth lint`: the autograd pitfalls that are visible without running the code.
//!
//! Files are parsed with Ruff's parser (`ruff_python_parser`, pinned: the version that builds
//! with this toolchain), walked once by [`checker::Checker`], which keeps the scope a rule
//! needs (inside an `nn.Module` subclass? inside its `forward`?) and dispatches each node to
//! the rules in [`rules`], one file per rule. Rules produce the same [`Finding`] type as the
//! runtime checks, with the same categories, so the renderers are shared.
//!
//! Paths are walked honouring `.gitignore` (the `ignore` crate) and files are checked in
//! parallel (rayon, with large stacks so deeply nested code cannot overflow). Unreadable,
//! non-UTF-8 and unparsable files are reported and the run goes on.

pub mod checker;
pub mod rules;

use std::path::{Path, PathBuf};

use gradsleuth_model::Finding;
use rayon::prelude::*;

/// A file that could not be checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub path: String,
    pub message: String,
}

/// Result of linting paths.
#[derive(Debug, Default)]
pub struct LintResult {
    pub findings: Vec<Finding>,
    pub errors: Vec<FileError>,
    pub files: usize,
    pub lines: usize,
}

/// Findings for one file's source.
pub fn lint_source(path: &str, source: &str) -> Result<Vec<Finding>, String> {
    let parsed =
        ruff_python_parser::parse_module(source).map_err(|e| format!("syntax error: {e}"))?;
    let mut checker = checker::Checker::new(path, source);
    checker.check_module(parsed.syntax());
    Ok(checker.findings)
}

/// Python files under `paths` (files given explicitly are taken as they are).
pub fn python_files(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<FileError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for p in paths {
        if p.is_file() {
            files.push(p.clone());
            continue;
        }
        if !p.exists() {
            errors.push(FileError {
                path: p.display().to_string(),
                message: "no such file or directory".into(),
            });
            continue;
        }
        // .gitignore files inside the tree apply; those of folders above a path the user named
        // do not (naming an ignored folder means "check it").
        for entry in ignore::WalkBuilder::new(p)
            .follow_links(false)
            .parents(false)
            .build()
        {
            match entry {
                Ok(e)
                    if e.file_type().is_some_and(|t| t.is_file())
                        && e.path()
                            .extension()
                            .is_some_and(|x| x == "py" || x == "pyi") =>
                {
                    files.push(e.into_path());
                }
                Ok(_) => {}
                Err(e) => errors.push(FileError {
                    path: p.display().to_string(),
                    message: e.to_string(),
                }),
            }
        }
    }
    files.sort();
    (files, errors)
}

fn lint_file(path: &Path) -> (Vec<Finding>, Option<FileError>, usize) {
    let name = path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            return (
                Vec::new(),
                Some(FileError {
                    path: name,
                    message: e.to_string(),
                }),
                0,
            )
        }
    };
    let source = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(_) => {
            return (
                Vec::new(),
                Some(FileError {
                    path: name,
                    message: "not UTF-8 text".into(),
                }),
                0,
            )
        }
    };
    let lines = source.lines().count();
    match lint_source(&name, &source) {
        Ok(f) => (f, None, lines),
        Err(message) => (
            Vec::new(),
            Some(FileError {
                path: name,
                message,
            }),
            lines,
        ),
    }
}

/// Lints every Python file under `paths`, in parallel.
pub fn lint_paths(paths: &[PathBuf]) -> LintResult {
    let (files, mut errors) = python_files(paths);
    let pool = rayon::ThreadPoolBuilder::new()
        .stack_size(256 << 20)
        .build();
    let per_file: Vec<(Vec<Finding>, Option<FileError>, usize)> = match pool {
        Ok(pool) => pool.install(|| files.par_iter().map(|p| lint_file(p)).collect()),
        Err(_) => files.iter().map(|p| lint_file(p)).collect(),
    };
    let mut result = LintResult {
        files: files.len(),
        ..Default::default()
    };
    for (f, e, lines) in per_file {
        result.findings.extend(f);
        errors.extend(e);
        result.lines += lines;
    }
    result.errors = errors;
    result
}
