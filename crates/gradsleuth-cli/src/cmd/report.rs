//! `gradsleuth report FILE`: re-analyse and render a saved capture, without Python.

use std::path::PathBuf;

use gradsleuth_model::Capture;

use crate::{CliError, Output};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// A capture written by `gradsleuth run --save-capture FILE`.
    pub capture: PathBuf,
    #[command(flatten)]
    pub output: Output,
}

pub fn load(path: &std::path::Path) -> Result<Capture, CliError> {
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::Io(format!("cannot read {}: {e}", path.display())))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        CliError::Io(format!(
            "{} is not a gradsleuth capture: not UTF-8 text",
            path.display()
        ))
    })?;
    Capture::from_json(&text).map_err(|e| CliError::Io(format!("{}: {e}", path.display())))
}

pub fn run(args: ReportArgs) -> Result<i32, CliError> {
    let capture = load(&args.capture)?;
    let report = gradsleuth_analysis::analyze(&capture);
    args.output.emit(&report)
}
