//! `gradsleuth explain [FILE|-]`: reads a traceback or a whole log (streamed) and explains
//! each recognised error. Never imports torch, never needs Python.

use std::io::BufReader;
use std::path::PathBuf;

use gradsleuth_explain::{Kb, Scanner};
use gradsleuth_model::Report;

use crate::{CliError, Output};

#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The log or traceback to read; `-` or nothing for standard input.
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub output: Output,
}

pub fn run(args: ExplainArgs) -> Result<i32, CliError> {
    let kb = Kb::builtin();
    let mut scanner = Scanner::new(kb);
    let name = match &args.file {
        Some(p) if p.as_os_str() != "-" => {
            let f = std::fs::File::open(p)
                .map_err(|e| CliError::Io(format!("cannot read {}: {e}", p.display())))?;
            scanner
                .read(BufReader::with_capacity(1 << 20, f))
                .map_err(|e| CliError::Io(format!("cannot read {}: {e}", p.display())))?;
            p.display().to_string()
        }
        _ => {
            scanner
                .read(BufReader::with_capacity(1 << 20, std::io::stdin().lock()))
                .map_err(|e| CliError::Io(format!("cannot read standard input: {e}")))?;
            "-".to_owned()
        }
    };
    let mut report = Report::new("explain");
    report.target.paths = vec![name];
    report.push_findings(scanner.findings());
    if report.findings.is_empty() {
        // Unrecognised: say what the error was, if there was one, and exit 2.
        match &scanner.last_exception {
            Some(e) => eprintln!("gradsleuth: not recognised: {}: {}", e.kind, e.message),
            None => eprintln!("gradsleuth: not recognised: no error found in the input"),
        }
        if let Some(e) = &scanner.last_exception {
            report.error = Some(gradsleuth_model::report::ReportErrorInfo {
                kind: e.kind.clone(),
                message: e.message.clone(),
                explained_by: Vec::new(),
                explanation: None,
            });
        }
        args.output.emit(&report)?;
        return Ok(2);
    }
    args.output.emit(&report)
}
