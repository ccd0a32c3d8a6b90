//! The data that flows through gradsleuth, one way: **capture → analysis → findings → renderers**.
//!
//! This crate owns the three records every other crate speaks:
//!
//! * [`capture::Capture`]: what the tracer saw while a training script ran: modules, the
//!   tensors that look like parameters, optimizers, backward calls, optimizer steps. It holds
//!   identities, shapes, norms and source locations, never tensor data, and it is versioned
//!   ([`capture::CAPTURE_VERSION`]) so a saved capture can be re-analysed later by the CLI
//!   without Python.
//! * [`finding::Finding`]: one diagnosed problem (or a deliberate choice worth stating), with
//!   its stable code, root-cause [`finding::Category`], the line the user must change, a chain
//!   in words and a concrete fix. Runtime checks and lint rules produce this same type.
//! * [`report::Report`]: what a command prints, serialised exactly as
//!   `schema/report.schema.json` describes.
//! * [`run_config::RunConfig`]: what `gradsleuth run` tells the interpreter it starts.
//!
//! Nothing here knows about Python, PyO3 or the terminal.

pub mod capture;
pub mod finding;
pub mod report;
pub mod run_config;

pub use capture::{Capture, CaptureError};
pub use finding::{package_of, Category, Explanation, Finding, Location, Related, Severity};
pub use report::{ParamRow, ParamStatus, Report, ReportError};
pub use run_config::RunConfig;

/// The version of gradsleuth that wrote a capture or report.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Ranks as ranges, `0-3, 5, 7-9` (input sorted ascending).
pub fn rank_ranges(ranks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let start = ranks[i];
        let mut end = start;
        while i + 1 < ranks.len() && ranks[i + 1] == end + 1 {
            end += 1;
            i += 1;
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(", ")
}
