//! The `gradsleuth` command line.
//!
//! [`main`] takes the argument vector and returns the process exit code; it never panics
//! on bad input and never prints a Rust backtrace. The Python package's console script calls
//! it through `gradsleuth._core.cli_main`, so one `pip install .` gives the command.
//!
//! Exit codes: `0` nothing at or above `--fail-on`; `1` findings at or above `--fail-on`;
//! `2` usage errors and unreadable input; for `run`, the script's own code when it failed.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use gradsleuth_model::{Report, Severity};

pub mod cmd;
pub mod proc;

#[derive(Parser, Debug)]
#[command(name = "gradsleuth", version, about = "Finds why PyTorch parameters do not learn, down to the line.", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a training script unmodified, watch its first steps, print the diagnosis.
    Run(cmd::run::RunArgs),
    /// Re-render saved captures; several (or a folder: the ranks of one job) are merged. No Python needed.
    Report(cmd::report::ReportArgs),
    /// Run the built-in demo: a realistic training script with silent bugs.
    Demo(cmd::demo::DemoArgs),
    /// Explain PyTorch errors in a traceback or a log: meaning, causes, checks, fix.
    Explain(cmd::explain::ExplainArgs),
    /// Check training code statically for the same pitfalls (no torch needed).
    Lint(cmd::lint::LintArgs),
    /// From a PyTorch name to its ATen op, kernels, autograd formula and gdb breakpoints.
    Where(cmd::where_::WhereArgs),
    /// Can this machine debug PyTorch's native code, and how? A checklist with fixes.
    Doctor(cmd::doctor::DoctorArgs),
    /// Write or merge .vscode/launch.json (debugpy + gdb), c_cpp_properties.json, a gdb file.
    Vscode(cmd::vscode::VscodeArgs),
    /// Which release of torch (or any package), or which commit of your repository, changed
    /// what the script does: a binary search with gradsleuth's findings, the error or the
    /// loss as the test, and the first op whose result differs.
    Bisect(cmd::bisect::BisectArgs),
    /// Cut a script down to a minimal standalone program with the same finding, and write the
    /// bug report's kit (repro.py, a failing test, a timing stub, the environment, an issue).
    Repro(cmd::repro::ReproArgs),
    /// One step of `bisect --git` (what `git bisect run` calls).
    #[command(hide = true)]
    BisectStep(cmd::bisect::StepArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    /// SARIF 2.1.0, for code scanning.
    Sarif,
    /// GitHub Actions annotations (`::error file=...`).
    Github,
    /// One self-contained HTML page: findings, parameters, the autograd graph, gradient flow.
    Html,
    /// Graphviz: the autograd graph, a cluster per module, cuts in red.
    Dot,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Sarif => "sarif",
            Format::Github => "github",
            Format::Html => "html",
            Format::Dot => "dot",
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum FailOn {
    Error,
    Warning,
    Never,
}

/// Options shared by every command that prints a report.
#[derive(clap::Args, Debug, Clone)]
pub struct Output {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Write the report to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Exit 1 when findings at or above this severity exist [default: error].
    #[arg(long, value_enum)]
    pub fail_on: Option<FailOn>,
    /// List every parameter in the text report, learning ones too.
    #[arg(long)]
    pub all_params: bool,
}

/// An error a user can act on; printed as `gradsleuth: error: ...`, exit 2.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Io(String),
}

/// A registry entry as SARIF describes a rule.
pub fn rule_info(r: gradsleuth_rules::Rule) -> gradsleuth_render::RuleInfo {
    gradsleuth_render::RuleInfo {
        code: r.code().to_owned(),
        name: r.name().to_owned(),
        category: r.category().as_str(),
        title: r.pitfall.title.clone(),
        doc: r.doc(),
        doc_markdown: r.doc_markdown(),
    }
}

/// The registry entries of the codes a report's findings have.
fn report_rules(report: &Report) -> Vec<gradsleuth_render::RuleInfo> {
    let mut codes: Vec<&str> = report.findings.iter().map(|f| f.code.as_str()).collect();
    codes.sort_unstable();
    codes.dedup();
    codes
        .into_iter()
        .filter_map(gradsleuth_rules::rule)
        .map(rule_info)
        .collect()
}

impl Output {
    /// Renders and writes the report; returns the exit code its findings call for.
    pub fn emit(&self, report: &Report) -> Result<i32, CliError> {
        self.emit_with_rules(report, &[])
    }

    /// As [`Output::emit`], with the rules' documentation for SARIF.
    pub fn emit_with_rules(
        &self,
        report: &Report,
        rules: &[gradsleuth_render::RuleInfo],
    ) -> Result<i32, CliError> {
        self.emit_full(report, rules, None)
    }

    /// As [`Output::emit`], with what the HTML page draws beyond the report.
    pub fn emit_full(
        &self,
        report: &Report,
        rules: &[gradsleuth_render::RuleInfo],
        capture: Option<&gradsleuth_model::Capture>,
    ) -> Result<i32, CliError> {
        let text =
            match self.format {
                Format::Html => gradsleuth_render::html(report, capture),
                Format::Dot => match capture {
                    Some(c) => gradsleuth_render::graph::dot(c, report),
                    None => return Err(CliError::Usage(
                        "--format dot draws the autograd graph of a run: use it with run or report"
                            .into(),
                    )),
                },
                Format::Json => gradsleuth_render::json(report),
                Format::Sarif if rules.is_empty() => {
                    gradsleuth_render::sarif(report, &report_rules(report))
                }
                Format::Sarif => gradsleuth_render::sarif(report, rules),
                Format::Github => gradsleuth_render::github(report),
                Format::Text => {
                    let color = self.out.is_none()
                        && std::io::stdout().is_terminal()
                        && std::env::var_os("NO_COLOR").is_none();
                    gradsleuth_render::text(
                        report,
                        gradsleuth_render::TextOptions {
                            color,
                            all_params: self.all_params,
                        },
                    )
                }
            };
        match &self.out {
            Some(path) => std::fs::write(path, text)
                .map_err(|e| CliError::Io(format!("cannot write {}: {e}", path.display())))?,
            None => {
                let mut out = anstream::stdout();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            }
        }
        Ok(self.exit_code(report))
    }

    pub fn exit_code(&self, report: &Report) -> i32 {
        let threshold = match self.fail_on.unwrap_or(FailOn::Error) {
            FailOn::Error => Severity::Error,
            FailOn::Warning => Severity::Warning,
            FailOn::Never => return 0,
        };
        i32::from(report.worst().is_some_and(|w| w >= threshold))
    }
}

/// Runs the CLI on `args` (including the program name) and returns the exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Lint(a) => cmd::lint::run(a),
        Command::Where(a) => cmd::where_::run(a),
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::Vscode(a) => cmd::vscode::run(a),
        Command::Bisect(a) => cmd::bisect::run(a),
        Command::Repro(a) => cmd::repro::run(a),
        Command::BisectStep(a) => cmd::bisect::step(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gradsleuth: error: {e}");
            2
        }
    }
}
