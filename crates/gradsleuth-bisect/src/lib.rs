//! `gradsleuth bisect`'s reasoning, free of processes and environments: which released
//! versions lie between a good and a bad one ([`version`]), which one to try next
//! ([`search`]), whether a run is good or bad by the user's predicate ([`predicate`]), the
//! first op whose result differs between the last good and the first bad environment
//! ([`diverge`]), and the report ([`report`]).
//!
//! The command line installs the candidates and runs the script (`gradsleuth-cli`'s
//! `bisect`); everything it decides is decided here, from plain records, and tested with
//! fixtures.

pub mod diverge;
pub mod predicate;
pub mod report;
pub mod search;
pub mod version;

pub use diverge::{first_divergence, Divergence};
pub use predicate::{Observation, Predicate, Verdict};
pub use report::{BisectReport, Tried};
pub use search::Search;
pub use version::Version;
