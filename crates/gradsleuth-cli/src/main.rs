//! Stand-alone binary of the CLI, for use without the Python package (e.g. `report`).
fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    std::process::exit(gradsleuth_cli::main(args));
}
