//! `gradsleuth where OP`: from a PyTorch name to its ATen op, kernels, autograd formula and
//! the breakpoints a debugger needs (see [`gradsleuth_native`]). Reads the installed torch's
//! files; never imports torch.

use std::io::Write;
use std::path::{Path, PathBuf};

use gradsleuth_native::{python_def, Index};

use crate::{CliError, Format};

#[derive(clap::Args, Debug)]
pub struct WhereArgs {
    /// `torch.relu`, `Tensor.add_`, `F.conv2d`, `torch.nn.functional.interpolate`, `aten::addmm.out`.
    pub op: String,
    /// The installed torch package folder (default: the one the Python interpreter finds).
    #[arg(long, value_name = "DIR")]
    pub torch: Option<PathBuf>,
    /// A PyTorch checkout: file:line of each kernel's definition in it.
    #[arg(long, value_name = "DIR")]
    pub source: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Where torch is installed, asked of the interpreter without importing torch.
fn find_torch() -> Result<PathBuf, CliError> {
    if let Some(d) = std::env::var_os("GRADSLEUTH_TORCH_DIR") {
        return Ok(PathBuf::from(d));
    }
    let python = std::env::var_os("GRADSLEUTH_PYTHON").unwrap_or_else(|| "python3".into());
    let out = std::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')",
        ])
        .output()
        .map_err(|e| CliError::Usage(format!("cannot run {}: {e} (use --torch DIR)", python.to_string_lossy())))?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if dir.is_empty() {
        return Err(CliError::Usage(
            "torch is not installed for this Python (use --torch DIR to point at a torch package folder)".into(),
        ));
    }
    Ok(PathBuf::from(dir))
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GRADSLEUTH_CACHE_DIR") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("gradsleuth")
}

/// A Python wrapper of this name (`F.interpolate` is Python that calls several ATen ops).
fn python_wrapper(torch_dir: &Path, query: &str) -> Option<(String, u32)> {
    let name = query.rsplit('.').next()?;
    let files: &[&str] = if query.starts_with("F.") || query.contains("nn.functional") {
        &["nn/functional.py"]
    } else if query.starts_with("torch.") {
        &["functional.py", "_tensor.py"]
    } else if query.starts_with("Tensor.") {
        &["_tensor.py"]
    } else {
        &[]
    };
    files.iter().find_map(|f| {
        let path = torch_dir.join(f);
        python_def(&path, name).map(|line| (path.display().to_string(), line))
    })
}

const TRACE_CALL: &str = r#"
import json, sys
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

ran = []

class Ops(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.replace("aten::", "")
        if func._overloadname != "default":
            name += "." + func._overloadname
        ran.append((name, "backward" if torch._C._current_graph_task_id() != -1 else "forward"))
        return func(*args, **(kwargs or {}))

env = {"torch": torch, "F": F, "nn": torch.nn}
with Ops():
    out = eval(sys.argv[1], env)
    outs = [out] if isinstance(out, torch.Tensor) else [o for o in (out if isinstance(out, (list, tuple)) else []) if isinstance(o, torch.Tensor)]
    outs = [o for o in outs if o.requires_grad]
    if outs:
        torch.autograd.backward([o.sum() for o in outs])
seen = []
for r in ran:
    if r not in seen:
        seen.append(r)
print(json.dumps(seen))
"#;

/// `where "F.interpolate(torch.randn(1, 3, 8, 8, requires_grad=True), scale_factor=2)"`: runs
/// the call (and its backward, when it needs grad) under a dispatch mode in the interpreter and
/// answers for the ATen ops that actually ran, which the YAML alone cannot tell (decompositions).
fn trace_call(expr: &str, index: &Index, format: Format) -> Result<i32, CliError> {
    let python = std::env::var_os("GRADSLEUTH_PYTHON").unwrap_or_else(|| "python3".into());
    let out = std::process::Command::new(&python)
        .args(["-c", TRACE_CALL, expr])
        .output()
        .map_err(|e| CliError::Usage(format!("cannot run {}: {e}", python.to_string_lossy())))?;
    let ran: Vec<(String, String)> = serde_json::from_slice(&out.stdout).map_err(|_| {
        CliError::Usage(format!(
            "the call failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ))
    })?;
    let answers: Vec<(String, String, Option<gradsleuth_native::Answer>)> = ran
        .into_iter()
        .map(|(op, phase)| {
            let a = index.lookup(&op);
            (op, phase, a)
        })
        .collect();
    let mut w = anstream::stdout();
    if format == Format::Json {
        let v: Vec<serde_json::Value> = answers
            .iter()
            .map(|(op, phase, a)| serde_json::json!({"op": op, "phase": phase, "answer": a}))
            .collect();
        let _ = writeln!(
            w,
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        );
        return Ok(0);
    }
    let _ = writeln!(w, "{expr} ran these ATen ops:");
    for (op, phase, a) in &answers {
        let detail = a.as_ref().map_or(String::new(), |a| {
            let o = a.overloads.first();
            let cpu = o.and_then(|o| {
                o.dispatch
                    .get("CPU")
                    .or_else(|| o.dispatch.get("CompositeExplicitAutograd"))
            });
            let node = o.and_then(|o| o.backward_node.clone());
            format!(
                "{}{}",
                cpu.map(|k| format!("  CPU kernel at::native::{k}"))
                    .unwrap_or_default(),
                node.map(|n| format!("  backward node {n}"))
                    .unwrap_or_default()
            )
        });
        let _ = writeln!(w, "  {phase:<9} aten::{op}{detail}");
    }
    let _ = writeln!(
        w,
        "(`gradsleuth where aten::OP` gives the breakpoints for one of them)"
    );
    Ok(0)
}

pub fn run(args: WhereArgs) -> Result<i32, CliError> {
    let torch_dir = match &args.torch {
        Some(d) => d.clone(),
        None => find_torch()?,
    };
    if !torch_dir.join("lib").is_dir() {
        return Err(CliError::Usage(format!(
            "{} is not a torch package folder (no lib/ inside)",
            torch_dir.display()
        )));
    }
    let (index, _cached) =
        Index::load_or_build(&torch_dir, &cache_dir()).map_err(|e| CliError::Io(e.to_string()))?;
    if args.op.contains('(') {
        return trace_call(&args.op, &index, args.format);
    }
    let wrapper = python_wrapper(&torch_dir, &args.op);
    let Some(mut answer) = index.lookup(&args.op) else {
        let mut msg = format!("{} is not an ATen op", args.op);
        if let Some((file, line)) = &wrapper {
            msg.push_str(&format!(
                " (it is Python: {file}:{line}, which calls ATen ops; `gradsleuth where \"{}(...)\"` with real arguments lists the ones that run)",
                args.op
            ));
        }
        msg.push_str(&format!(
            "; closest ATen ops: {}",
            index.closest(&args.op, 5).join(", ")
        ));
        if args.format == Format::Json {
            let v = serde_json::json!({"query": args.op, "error": msg, "python_def": wrapper, "closest": index.closest(&args.op, 5)});
            println!("{v}");
        } else {
            eprintln!("gradsleuth: {msg}");
        }
        return Ok(2);
    };
    answer.python_def = wrapper;
    let mut out = anstream::stdout();
    if args.format == Format::Json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        );
        return Ok(0);
    }
    let _ = writeln!(
        out,
        "{} → aten::{} ({} overload{})",
        args.op,
        answer.op,
        answer.overloads.len(),
        if answer.overloads.len() == 1 { "" } else { "s" }
    );
    if let Some((file, line)) = &answer.python_def {
        let _ = writeln!(out, "  Python wrapper: {file}:{line}");
    }
    for o in &answer.overloads {
        let _ = writeln!(out, "\n  {}", o.schema);
        if !o.dispatch.is_empty() {
            let d: Vec<String> = o
                .dispatch
                .iter()
                .map(|(k, v)| format!("{k} → {v}"))
                .collect();
            let _ = writeln!(out, "    dispatch: {}", d.join(" · "));
        }
        if let Some(s) = &o.structured_delegate {
            let _ = writeln!(out, "    structured: computed by {s}");
        }
        if let Some(n) = &o.backward_node {
            let f: Vec<String> = o
                .derivatives
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            let _ = writeln!(out, "    autograd: {n} · {}", f.join(" · "));
        }
    }
    let _ = writeln!(
        out,
        "\nfunctions in {} ({}):",
        index.library,
        if answer.line_level {
            "with DWARF: line-level breakpoints work"
        } else {
            "no DWARF: break by function name, backtraces without source lines; a REL_WITH_DEB_INFO=1 build (or USE_CUSTOM_DEBINFO for chosen files) gives lines"
        }
    );
    if answer.symbols.is_empty() {
        let _ = writeln!(
            out,
            "  (none exported under at::native / at::_ops / autograd::generated for this op)"
        );
    }
    for s in &answer.symbols {
        let _ = writeln!(out, "  {:<10} {}", s.role, s.demangled);
    }
    let _ = writeln!(out, "\ngdb (save as a file and run `gdb -x FILE --args python train.py`; loading torch's symbols takes 30-60 s):");
    for l in &answer.gdb {
        let _ = writeln!(out, "  {l}");
    }
    if let Some(src) = &args.source {
        let kernels: Vec<String> = answer
            .overloads
            .iter()
            .flat_map(|o| o.dispatch.values().cloned())
            .chain(std::iter::once(answer.op.clone()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let defs = gradsleuth_native::kernel_sources(src, &kernels);
        let _ = writeln!(out, "\nkernel definitions in {}:", src.display());
        if defs.is_empty() {
            let _ = writeln!(
                out,
                "  none found under aten/src/ATen/native (is it a PyTorch checkout?)"
            );
        }
        for (k, f, l) in defs {
            let _ = writeln!(out, "  at::native::{k}  {f}:{l}");
        }
    }
    if !answer.vscode_breakpoints.is_empty() {
        let _ = writeln!(
            out,
            "\nVS Code function breakpoints: {}",
            answer.vscode_breakpoints.join(", ")
        );
    }
    Ok(0)
}
