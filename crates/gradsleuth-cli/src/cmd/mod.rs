//! One module per subcommand.
pub mod bisect;
pub mod demo;
pub mod doctor;
pub mod explain;
pub mod lint;
pub mod report;
pub mod repro;
pub mod run;
pub mod vscode;
pub mod where_;
