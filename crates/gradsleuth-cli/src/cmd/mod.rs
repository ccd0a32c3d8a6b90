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

/// What a bug report says about the machine, as `python` sees it: Python, torch, the CUDA torch
/// was built with, the OS, gradsleuth. (`bisect` and `repro` print it.)
pub(crate) fn environment(python: &std::path::Path) -> Vec<(String, String)> {
    let code = "import platform\ntry:\n    import torch\n    t, c = torch.__version__, (torch.version.cuda or 'none')\nexcept Exception:\n    t, c = 'not importable', '-'\nprint(platform.python_version()); print(t); print(c); print(platform.platform())";
    let out = std::process::Command::new(python)
        .args(["-c", code])
        .stdin(std::process::Stdio::null())
        .output()
        .ok();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut lines = text.lines();
    let mut env = Vec::new();
    for key in ["Python", "torch", "CUDA (torch built with)", "OS"] {
        env.push((key.to_owned(), lines.next().unwrap_or("?").to_owned()));
    }
    env.push((
        "gradsleuth".to_owned(),
        gradsleuth_model::TOOL_VERSION.to_owned(),
    ));
    env
}
