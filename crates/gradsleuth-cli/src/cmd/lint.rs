//! `gradsleuth lint [PATHS...]`: static checks of training code (no Python, no torch).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use gradsleuth_lint::{LintConfig, LintOptions};
use gradsleuth_model::{Category, Finding, Report, Severity};

use crate::{CliError, FailOn, Output};

#[derive(clap::Args, Debug)]
pub struct LintArgs {
    /// Files or folders to check (folders honour .gitignore). Default: the current folder.
    pub paths: Vec<PathBuf>,
    /// Only these rules: codes, code prefixes (GS31) or categories (detach), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "RULES")]
    pub select: Vec<String>,
    /// Skip these rules (same forms as --select); added to the configuration's `ignore`.
    #[arg(long, value_delimiter = ',', value_name = "RULES")]
    pub ignore: Vec<String>,
    /// Read `[tool.gradsleuth]` from this pyproject.toml instead of discovering one.
    #[arg(long, value_name = "PYPROJECT")]
    pub config: Option<PathBuf>,
    /// Ignore any pyproject.toml configuration.
    #[arg(long, conflicts_with = "config")]
    pub isolated: bool,
    /// Print the number of findings per rule instead of the findings.
    #[arg(long)]
    pub statistics: bool,
    /// Apply the fixes that keep the code's meaning (a list of modules to nn.ModuleList, ...).
    #[arg(long, conflicts_with = "diff")]
    pub fix: bool,
    /// Print the fixes as a unified diff instead of writing them; exit 1 if there are any.
    #[arg(long)]
    pub diff: bool,
    /// List the rules with their documentation and exit.
    #[arg(long)]
    pub list_rules: bool,
    #[command(flatten)]
    pub output: Output,
}

fn rule_infos() -> Vec<gradsleuth_render::RuleInfo> {
    gradsleuth_lint::rules::ALL
        .iter()
        .map(|r| crate::rule_info(r.rule()))
        .collect()
}

/// Every lint rule with its documentation, from the rule registry.
fn list_rules() -> i32 {
    let mut out = anstream::stdout();
    for r in gradsleuth_lint::rules::ALL {
        let doc = r.doc().replace('\n', "\n    ");
        let _ = writeln!(
            out,
            "{}  {:<30} {}\n    {doc}\n",
            r.code,
            r.name(),
            r.category().as_str(),
        );
    }
    0
}

/// The configuration: `--config`, or the pyproject.toml found from the first path up.
fn configuration(args: &LintArgs, paths: &[PathBuf]) -> Result<LintOptions, CliError> {
    let found = if args.isolated {
        None
    } else if let Some(file) = &args.config {
        let cfg = LintConfig::from_pyproject(file).map_err(CliError::Usage)?;
        Some((file.clone(), cfg.unwrap_or_default()))
    } else {
        let start = paths.first().cloned().unwrap_or_else(|| PathBuf::from("."));
        LintConfig::discover(&start).map_err(CliError::Usage)?
    };
    let (root, mut config) = match found {
        Some((file, cfg)) => (
            std::fs::canonicalize(&file)
                .ok()
                .and_then(|p| p.parent().map(PathBuf::from)),
            cfg,
        ),
        None => (None, LintConfig::default()),
    };
    if !args.select.is_empty() {
        config.select = args.select.clone();
    }
    config.ignore.extend(args.ignore.iter().cloned());
    let known = |s: &str| {
        let upper = s.trim().to_ascii_uppercase();
        gradsleuth_lint::rules::ALL
            .iter()
            .any(|r| r.code.starts_with(&upper) || r.category().as_str() == s.trim())
    };
    if let Some(bad) = config
        .select
        .iter()
        .chain(config.ignore.iter())
        .find(|s| !known(s))
    {
        return Err(CliError::Usage(format!(
            "unknown rule selector `{bad}` (use a code like GS316, a prefix like GS31, or a category like detach; `gradsleuth lint --list-rules` lists them)"
        )));
    }
    let exclude = match &root {
        Some(r) => config.exclude.iter().map(|e| r.join(e)).collect(),
        None => Vec::new(),
    };
    Ok(LintOptions {
        config,
        exclude,
        fix: args.fix || args.diff,
    })
}

pub fn run(args: LintArgs) -> Result<i32, CliError> {
    if args.list_rules {
        return Ok(list_rules());
    }
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let options = configuration(&args, &paths)?;
    let mut output = args.output.clone();
    if output.fail_on.is_none() {
        output.fail_on = match options.config.fail_on.as_deref() {
            None => None,
            Some("error") => Some(FailOn::Error),
            Some("warning") => Some(FailOn::Warning),
            Some("never") => Some(FailOn::Never),
            Some(other) => {
                return Err(CliError::Usage(format!(
                    "[tool.gradsleuth] fail-on = \"{other}\": expected error, warning or never"
                )))
            }
        };
    }
    let started = std::time::Instant::now();
    let result = gradsleuth_lint::lint_paths(&paths, &options);
    eprintln!(
        "gradsleuth lint: checked {} ({} lines) in {:.2} s",
        if result.files == 1 {
            "1 file".to_owned()
        } else {
            format!("{} files", result.files)
        },
        result.lines,
        started.elapsed().as_secs_f64()
    );
    if args.diff {
        let mut out = anstream::stdout();
        for f in &result.fixed {
            let _ = out.write_all(f.diff().as_bytes());
        }
        let n: usize = result.fixed.iter().map(|f| f.fixed.len()).sum();
        eprintln!(
            "gradsleuth lint: {n} fixable finding(s) in {} file(s)",
            result.fixed.len()
        );
        return Ok(i32::from(n > 0));
    }
    let mut findings = result.findings;
    if args.fix {
        let mut n = 0;
        for f in &result.fixed {
            std::fs::write(&f.path, &f.after)
                .map_err(|e| CliError::Io(format!("cannot write {}: {e}", f.path)))?;
            n += f.fixed.len();
            findings.retain(|x| {
                !(x.location.as_ref().is_some_and(|l| l.file == f.path)
                    && f.fixed.iter().any(|(code, line)| {
                        *code == x.code && x.location.as_ref().is_some_and(|l| l.line == *line)
                    }))
            });
        }
        eprintln!(
            "gradsleuth lint: fixed {n} finding(s) in {} file(s)",
            result.fixed.len()
        );
    }
    let mut report = Report::new("lint");
    report.target.paths = paths.iter().map(|p| p.display().to_string()).collect();
    for e in &result.errors {
        eprintln!("gradsleuth: {}: {}", e.path, e.message);
        // A file that cannot be checked is said in the report too, so JSON users see it.
        let mut f = Finding::new(
            "GS300",
            Category::Other,
            Severity::Warning,
            format!("not checked: {}", e.message),
        );
        f.location = Some(gradsleuth_model::Location::new(e.path.clone(), 1));
        findings.push(f);
    }
    report.push_findings(findings);
    if args.statistics {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for f in &report.findings {
            *counts.entry(f.code.as_str()).or_default() += 1;
        }
        let mut rows: Vec<(&str, usize)> = counts.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let mut out = anstream::stdout();
        for (code, n) in rows {
            let name = gradsleuth_lint::rules::ALL
                .iter()
                .find(|r| r.code == code)
                .map_or("file-not-checked", |r| r.name());
            let _ = writeln!(out, "{n:>6}  {code}  {name}");
        }
        return Ok(output.exit_code(&report));
    }
    output.emit_with_rules(&report, &rule_infos())
}
