//! `gradsleuth lint [PATHS...]`: static checks of training code (no Python, no torch).

use std::path::PathBuf;

use gradsleuth_model::{Category, Finding, Report, Severity};

use crate::{CliError, Output};

#[derive(clap::Args, Debug)]
pub struct LintArgs {
    /// Files or folders to check (folders honour .gitignore). Default: the current folder.
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub output: Output,
}

pub fn run(args: LintArgs) -> Result<i32, CliError> {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let started = std::time::Instant::now();
    let result = gradsleuth_lint::lint_paths(&paths);
    eprintln!(
        "gradsleuth lint: checked {} files ({} lines) in {:.2} s",
        result.files,
        result.lines,
        started.elapsed().as_secs_f64()
    );
    let mut report = Report::new("lint");
    report.target.paths = paths.iter().map(|p| p.display().to_string()).collect();
    let mut findings = result.findings;
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
    args.output.emit(&report)
}
