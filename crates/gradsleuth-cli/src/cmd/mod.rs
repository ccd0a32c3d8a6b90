//! One module per subcommand.
pub mod demo;
pub mod explain;
pub mod report;
pub mod run;
