//! One module per subcommand.
pub mod demo;
pub mod report;
pub mod run;
