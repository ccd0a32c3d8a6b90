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

pub mod xref;
pub use xref::cross_reference;
pub mod checker;
pub mod config;
pub mod flow;
pub mod holders;
pub mod path;
pub mod rules;
pub mod selector;
pub mod spelling;

use std::path::{Path, PathBuf};

use gradsleuth_model::Finding;
use rayon::prelude::*;

pub use checker::Edit;
pub use config::LintConfig;

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
    /// With [`LintOptions::fix`]: the files whose fixes apply, before and after.
    pub fixed: Vec<FixedFile>,
}

/// A file with its fixes applied (not written: the caller writes or diffs it).
#[derive(Debug, Clone)]
pub struct FixedFile {
    pub path: String,
    pub before: String,
    pub after: String,
    /// The findings fixed: (code, line).
    pub fixed: Vec<(String, u32)>,
}

impl FixedFile {
    /// A unified diff of the fix, for `--diff`.
    pub fn diff(&self) -> String {
        similar::TextDiff::from_lines(&self.before, &self.after)
            .unified_diff()
            .context_radius(3)
            .header(
                &format!("a/{}", self.path.trim_start_matches("./")),
                &format!("b/{}", self.path.trim_start_matches("./")),
            )
            .to_string()
    }
}

/// How to lint: which rules, and whether to compute fixes.
#[derive(Debug, Default, Clone)]
pub struct LintOptions {
    pub config: LintConfig,
    /// Absolute paths not to check (from `exclude`).
    pub exclude: Vec<PathBuf>,
    pub fix: bool,
}

/// One file's findings (after `# noqa` and selection) and the edits that fix some of them.
#[derive(Debug, Default)]
pub struct Checked {
    pub findings: Vec<Finding>,
    pub edits: Vec<Edit>,
}

/// Applies non-overlapping edits (the first of overlapping ones wins).
pub fn apply_edits(source: &str, edits: &[Edit]) -> String {
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by_key(|e| (e.start, e.end));
    let mut out = String::with_capacity(source.len() + 64);
    let mut at = 0;
    for e in sorted {
        if e.start < at
            || e.end > source.len()
            || !source.is_char_boundary(e.start)
            || !source.is_char_boundary(e.end)
        {
            continue;
        }
        out.push_str(&source[at..e.start]);
        out.push_str(&e.content);
        at = e.end;
    }
    out.push_str(&source[at..]);
    out
}

/// Findings for one file's source, every rule on (`# noqa` honoured).
pub fn lint_source(path: &str, source: &str) -> Result<Vec<Finding>, String> {
    lint_source_with(path, source, &LintConfig::default()).map(|c| c.findings)
}

/// Findings and fixes for one file's source under a configuration.
pub fn lint_source_with(path: &str, source: &str, config: &LintConfig) -> Result<Checked, String> {
    let parsed =
        ruff_python_parser::parse_module(source).map_err(|e| format!("syntax error: {e}"))?;
    let mut module = parsed.into_syntax();
    spelling::respell(&mut module);
    let inlined = holders::inline_kept(&mut module);
    let mut checker = checker::Checker::new(path, source);
    checker.inlined = inlined;
    checker.check_module(&module);
    let lines: Vec<&str> = source.lines().collect();
    let keep = |code: &str, category: &str, line: u32| {
        config.enabled(code, category)
            && !lines
                .get(line.saturating_sub(1) as usize)
                .is_some_and(|l| config::noqa(l, code))
    };
    let findings: Vec<Finding> = checker
        .findings
        .into_iter()
        .filter(|f| {
            keep(
                &f.code,
                &f.category.as_str(),
                f.location.as_ref().map_or(0, |l| l.line),
            )
        })
        .collect();
    // One cause, one finding: a `@torch.no_grad()` on `forward` is GS304's, which says so more
    // precisely than the data flow's cut at the same decorator (GS319).
    let at = |f: &Finding| f.location.as_ref().map(|l| (l.line, l.column));
    let decorated: Vec<_> = findings
        .iter()
        .filter(|f| f.code == rules::no_grad_forward::RULE.code)
        .filter_map(at)
        .collect();
    let findings: Vec<Finding> = findings
        .into_iter()
        .filter(|f| {
            f.code != rules::no_grad_cut::RULE.code || at(f).is_none_or(|l| !decorated.contains(&l))
        })
        .collect();
    let edits = checker
        .edits
        .into_iter()
        .filter(|e| {
            findings
                .iter()
                .any(|f| f.code == e.code && f.location.as_ref().is_some_and(|l| l.line == e.line))
        })
        .collect();
    Ok(Checked { findings, edits })
}

/// Python files under `paths` (files given explicitly are taken as they are), minus those
/// under an `exclude`d path.
pub fn python_files(paths: &[PathBuf], exclude: &[PathBuf]) -> (Vec<PathBuf>, Vec<FileError>) {
    let excluded = |p: &Path| {
        !exclude.is_empty()
            && std::fs::canonicalize(p).is_ok_and(|c| exclude.iter().any(|x| c.starts_with(x)))
    };
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for p in paths {
        if p.is_file() {
            if !excluded(p) {
                files.push(p.clone());
            }
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
            .filter_entry({
                let exclude = exclude.to_vec();
                move |e| {
                    exclude.is_empty()
                        || !std::fs::canonicalize(e.path())
                            .is_ok_and(|c| exclude.iter().any(|x| c.starts_with(x)))
                }
            })
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

type PerFile = (Vec<Finding>, Option<FileError>, usize, Option<FixedFile>);

fn lint_file(path: &Path, options: &LintOptions) -> PerFile {
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
                None,
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
                None,
            )
        }
    };
    let lines = source.lines().count();
    match lint_source_with(&name, &source, &options.config) {
        Ok(checked) => {
            let fixed = (options.fix && !checked.edits.is_empty()).then(|| FixedFile {
                path: name.clone(),
                after: apply_edits(&source, &checked.edits),
                fixed: checked
                    .edits
                    .iter()
                    .map(|e| (e.code.clone(), e.line))
                    .collect(),
                before: source,
            });
            (checked.findings, None, lines, fixed)
        }
        Err(message) => (
            Vec::new(),
            Some(FileError {
                path: name,
                message,
            }),
            lines,
            None,
        ),
    }
}

/// Lints every Python file under `paths`, in parallel.
pub fn lint_paths(paths: &[PathBuf], options: &LintOptions) -> LintResult {
    let (files, mut errors) = python_files(paths, &options.exclude);
    let pool = rayon::ThreadPoolBuilder::new()
        .stack_size(256 << 20)
        .build();
    let per_file: Vec<PerFile> = match pool {
        Ok(pool) => pool.install(|| files.par_iter().map(|p| lint_file(p, options)).collect()),
        Err(_) => files.iter().map(|p| lint_file(p, options)).collect(),
    };
    let mut result = LintResult {
        files: files.len(),
        ..Default::default()
    };
    for (f, e, lines, fixed) in per_file {
        result.findings.extend(f);
        errors.extend(e);
        result.lines += lines;
        result.fixed.extend(fixed);
    }
    result.errors = errors;
    result
}
