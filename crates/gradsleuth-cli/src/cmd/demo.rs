//! `gradsleuth demo`: writes the embedded training script to a temporary folder and runs it
//! under `gradsleuth run`, so a new user sees a real diagnosis in one command.

use clap::Parser;

use crate::{CliError, Output};

/// A realistic little training script with three silent bugs (see its docstring).
pub const DEMO_SCRIPT: &str = include_str!("demo_train.py");

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Only print the demo script.
    #[arg(long)]
    pub print_script: bool,
    #[command(flatten)]
    pub output: Output,
}

pub fn run(args: DemoArgs) -> Result<i32, CliError> {
    if args.print_script {
        print!("{DEMO_SCRIPT}");
        return Ok(0);
    }
    let dir = tempfile::tempdir()
        .map_err(|e| CliError::Io(format!("cannot create a temporary directory: {e}")))?;
    let script = dir.path().join("train.py");
    std::fs::write(&script, DEMO_SCRIPT).map_err(|e| CliError::Io(e.to_string()))?;
    let fmt = args.output.format.name();
    let mut argv = vec![
        "gradsleuth".to_string(),
        "run".into(),
        "--format".into(),
        fmt.into(),
        "--fail-on".into(),
        "never".into(),
    ];
    if let Some(out) = &args.output.out {
        argv.extend(["--out".into(), out.to_string_lossy().into_owned()]);
    }
    argv.push(script.to_string_lossy().into_owned());
    let run_args = match crate::Cli::try_parse_from(argv) {
        Ok(crate::Cli {
            command: crate::Command::Run(a),
        }) => a,
        _ => return Err(CliError::Usage("internal: demo arguments".into())),
    };
    let _: &Output = &args.output;
    crate::cmd::run::run(run_args)
}
