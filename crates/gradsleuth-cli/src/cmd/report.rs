//! `gradsleuth report CAPTURE...`: re-analyse and render saved captures, without Python. One
//! capture gives its report; several (or a folder of them, as `run --nproc-per-node
//! --save-capture DIR` writes) are the ranks of one job, merged (`command: merge`), one file
//! at a time so thousands of ranks fit in little memory.

use std::path::{Path, PathBuf};

use gradsleuth_analysis::merge::{Merger, RankDigest};
use gradsleuth_model::Capture;

use crate::{CliError, Output};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Captures written by `gradsleuth run --save-capture`, or folders of them (merged).
    #[arg(required = true)]
    pub captures: Vec<PathBuf>,
    #[command(flatten)]
    pub output: Output,
}

pub fn load(path: &Path) -> Result<Capture, CliError> {
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

/// `rank12.json` -> 12.
pub fn rank_of(path: &Path) -> Option<u32> {
    let stem = path.file_stem()?.to_str()?;
    let digits: String = stem
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// The capture files named by the arguments (folders: their `*.json`, sorted by rank).
pub fn capture_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inner: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| CliError::Io(format!("cannot read {}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            inner.sort_by_key(|f| (rank_of(f), f.clone()));
            if inner.is_empty() {
                return Err(CliError::Io(format!(
                    "{}: no capture files (*.json) in it",
                    p.display()
                )));
            }
            files.extend(inner);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

pub fn run(args: ReportArgs) -> Result<i32, CliError> {
    let files = capture_files(&args.captures)?;
    if let [one] = files.as_slice() {
        let capture = load(one)?;
        let report =
            gradsleuth_analysis::analyze_annotated(&capture, gradsleuth_lint::cross_reference);
        return args.output.emit_full(&report, &[], Some(&capture));
    }
    args.output.emit(&merge_files(
        &files,
        Merger::new(0).annotated(gradsleuth_lint::cross_reference),
    )?)
}

/// Merges capture files: read and analysed in parallel, a chunk at a time, folded in order,
/// so memory holds one chunk of captures, not all of them.
pub fn merge_files(
    files: &[PathBuf],
    mut merger: Merger,
) -> Result<gradsleuth_model::Report, CliError> {
    use rayon::prelude::*;
    const CHUNK: usize = 32;
    let annotate = merger.annotate();
    for (c, chunk) in files.chunks(CHUNK).enumerate() {
        let digests: Vec<Result<RankDigest, CliError>> = chunk
            .par_iter()
            .enumerate()
            .map(|(i, f)| {
                let capture = load(f)?;
                let fallback = rank_of(f).unwrap_or((c * CHUNK + i) as u32);
                Ok(RankDigest::of(&capture, fallback, annotate))
            })
            .collect();
        for d in digests {
            merger.fold(d?);
        }
    }
    Ok(merger.finish())
}
