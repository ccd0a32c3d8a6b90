//! One module per subcommand.
pub mod demo;
pub mod explain;
pub mod lint;
pub mod report;
pub mod run;
pub mod where_;
