//! `gradsleuth where OP`: from a Python-level PyTorch name to what runs below it, read from
//! the installed torch itself, without importing it:
//!
//! * the ATen op and its overloads, and its dispatch table (backend -> kernel), from torchgen's
//!   packaged `native_functions.yaml`;
//! * the autograd formula and the backward node's name, from `derivatives.yaml`;
//! * the C++ functions a debugger would stop in, only those present in the dynamic symbol
//!   table of `libtorch_cpu.so` (ELF read with `object`, names demangled with `cpp_demangle`):
//!   `at::native::<kernel>`, the dispatcher entry `at::_ops::<op>::call`, the backward node's
//!   `apply`; with the exact mangled name, ready-to-paste gdb `break` lines;
//! * the Python wrapper's `def` (file:line) for functions written in Python (`F.interpolate`).
//!
//! The index (YAML + symbols) is built once per torch install and cached, keyed by the
//! library's path, size and mtime ([`Index::load_or_build`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One ATen function schema (`relu(Tensor self) -> Tensor`) and how it dispatches.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct OpEntry {
    /// `relu`, `add.Tensor`, `addmm.out`.
    pub name: String,
    pub schema: String,
    /// Backend key -> kernel function (`CPU, CUDA` -> `relu`).
    pub dispatch: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_delegate: Option<String>,
    /// Autograd formulas (input -> expression) and the backward node name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub derivatives: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_node: Option<String>,
}

/// A symbol present in the library: mangled and readable.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Symbol {
    pub mangled: String,
    pub demangled: String,
    /// `kernel`, `dispatcher`, `backward`.
    pub role: String,
}

/// Everything `where` needs, per torch install.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Index {
    pub torch_dir: String,
    pub library: String,
    pub ops: Vec<OpEntry>,
    /// Base op name (`add`) -> symbols found for it.
    pub symbols: BTreeMap<String, Vec<Symbol>>,
    /// The library has DWARF (line-level breakpoints possible).
    pub has_debug_info: bool,
}

#[derive(Debug)]
pub enum NativeError {
    Io(String),
    Format(String),
}

impl std::fmt::Display for NativeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NativeError::Io(s) | NativeError::Format(s) => f.write_str(s),
        }
    }
}

#[derive(Deserialize)]
struct RawFunc {
    func: String,
    #[serde(default)]
    dispatch: Option<BTreeMap<String, String>>,
    #[serde(default)]
    structured_delegate: Option<String>,
}

/// `relu.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)` -> `relu.out`.
fn op_name(schema: &str) -> &str {
    schema.split('(').next().unwrap_or(schema).trim()
}

/// The base name: `add.Tensor` -> `add`, `add_` -> `add_`.
pub fn base(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

/// `relu` -> `ReluBackward0`, `_softmax` -> `SoftmaxBackward0`, `addmm` -> `AddmmBackward0`.
pub fn backward_node(op: &str) -> String {
    let mut out = String::new();
    for part in base(op)
        .trim_end_matches('_')
        .split('_')
        .filter(|p| !p.is_empty())
    {
        let mut cs = part.chars();
        if let Some(c) = cs.next() {
            out.extend(c.to_uppercase());
            out.push_str(cs.as_str());
        }
    }
    out.push_str("Backward0");
    out
}

/// Parses `native_functions.yaml` and `derivatives.yaml`.
pub fn parse_yaml(native: &str, derivatives: &str) -> Result<Vec<OpEntry>, NativeError> {
    let raw: Vec<RawFunc> = serde_yaml::from_str(native)
        .map_err(|e| NativeError::Format(format!("native_functions.yaml: {e}")))?;
    let ders: Vec<BTreeMap<String, serde_yaml::Value>> = serde_yaml::from_str(derivatives)
        .map_err(|e| NativeError::Format(format!("derivatives.yaml: {e}")))?;
    let mut by_name: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    for d in ders {
        let Some(name) = d.get("name").and_then(|v| v.as_str()) else {
            continue;
        };
        let formulas = d
            .iter()
            .filter(|(k, _)| {
                k.as_str() != "name"
                    && !k.starts_with("dispatch")
                    && k.as_str() != "output_differentiability"
            })
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
            .collect();
        by_name.insert(op_name(name).to_owned(), formulas);
    }
    Ok(raw
        .into_iter()
        .map(|f| {
            let name = op_name(&f.func).to_owned();
            let mut dispatch = BTreeMap::new();
            for (keys, kernel) in f.dispatch.unwrap_or_default() {
                for k in keys.split(',') {
                    dispatch.insert(k.trim().to_owned(), kernel.trim().to_owned());
                }
            }
            let derivatives = by_name.remove(&name).unwrap_or_default();
            let backward_node = (!derivatives.is_empty()).then(|| backward_node(&name));
            OpEntry {
                name,
                schema: f.func,
                dispatch,
                structured_delegate: f.structured_delegate,
                derivatives,
                backward_node,
            }
        })
        .collect())
}

/// The identifier after a mangled nested-name prefix: `_ZN2at6native4reluERK...` with prefix
/// `_ZN2at6native` -> `relu`.
fn next_ident(rest: &str) -> Option<&str> {
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let len: usize = rest[..digits].parse().ok()?;
    rest.get(digits..digits + len)
}

/// Scans the dynamic symbols of `library` for the functions of `ops`: kernels
/// (`at::native::<kernel>`), dispatcher entries (`at::_ops::<op>::call`), backward nodes
/// (`torch::autograd::generated::<Node>::apply`).
pub fn scan_symbols(
    library: &Path,
    ops: &[OpEntry],
) -> Result<(BTreeMap<String, Vec<Symbol>>, bool), NativeError> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let file = std::fs::File::open(library)
        .map_err(|e| NativeError::Io(format!("cannot open {}: {e}", library.display())))?;
    // SAFETY: read-only mapping of a library file; we only read it while it is mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| NativeError::Io(format!("cannot map {}: {e}", library.display())))?;
    let obj = object::File::parse(&*map).map_err(|e| {
        NativeError::Format(format!(
            "{} is not a readable ELF file: {e}",
            library.display()
        ))
    })?;
    let has_debug_info = obj
        .section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0);
    // Which op each kernel, op struct and backward node belongs to.
    let mut kernel_of: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    let mut ops_struct: HashMap<String, &str> = HashMap::new();
    let mut node_of: HashMap<&str, &str> = HashMap::new();
    for op in ops {
        let b = base(&op.name);
        for k in op.dispatch.values() {
            kernel_of.entry(k.as_str()).or_default().insert(b);
        }
        kernel_of.entry(b).or_default().insert(b);
        ops_struct.insert(op.name.replace('.', "_"), b);
        if let Some(n) = &op.backward_node {
            node_of.insert(n.as_str(), b);
        }
    }
    let mut out: BTreeMap<String, Vec<Symbol>> = BTreeMap::new();
    let mut push = |op: &str, mangled: &str, role: &str| {
        let list = out.entry(op.to_owned()).or_default();
        if list.len() < 40 {
            let demangled = cpp_demangle::Symbol::new(mangled)
                .ok()
                .and_then(|s| s.demangle(&cpp_demangle::DemangleOptions::default()).ok())
                .unwrap_or_else(|| mangled.to_owned());
            list.push(Symbol {
                mangled: mangled.to_owned(),
                demangled,
                role: role.to_owned(),
            });
        }
    };
    for sym in obj.dynamic_symbols() {
        if !sym.is_definition() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if let Some(rest) = name.strip_prefix("_ZN2at6native") {
            if let Some(id) = next_ident(rest) {
                if let Some(set) = kernel_of.get(id) {
                    for op in set {
                        push(op, name, "kernel");
                    }
                }
            }
        } else if let Some(rest) = name.strip_prefix("_ZN2at4_ops") {
            if let Some(id) = next_ident(rest) {
                let after = &rest[rest.find(id).map_or(0, |i| i + id.len())..];
                if after.starts_with("4callE") {
                    if let Some(op) = ops_struct.get(id) {
                        push(op, name, "dispatcher");
                    }
                }
            }
        } else if let Some(rest) = name.strip_prefix("_ZN5torch8autograd9generated") {
            if let Some(id) = next_ident(rest) {
                let after = &rest[rest.find(id).map_or(0, |i| i + id.len())..];
                if after.starts_with("5apply") {
                    if let Some(op) = node_of.get(id) {
                        push(op, name, "backward");
                    }
                }
            }
        }
    }
    for list in out.values_mut() {
        list.sort();
        list.dedup();
    }
    Ok((out, has_debug_info))
}

impl Index {
    /// Builds the index of the torch installed at `torch_dir`.
    pub fn build(torch_dir: &Path) -> Result<Index, NativeError> {
        let site = torch_dir.parent().unwrap_or(torch_dir);
        let read = |p: PathBuf| {
            std::fs::read_to_string(&p)
                .map_err(|e| NativeError::Io(format!("cannot read {}: {e}", p.display())))
        };
        let native = read(site.join("torchgen/packaged/ATen/native/native_functions.yaml"))?;
        let ders = read(site.join("torchgen/packaged/autograd/derivatives.yaml"))?;
        let ops = parse_yaml(&native, &ders)?;
        let library = torch_dir.join("lib/libtorch_cpu.so");
        let (mut symbols, has_debug_info) = scan_symbols(&library, &ops)?;
        // CUDA kernels live in libtorch_cuda.so, when the install has it.
        let cuda = torch_dir.join("lib/libtorch_cuda.so");
        if cuda.exists() {
            if let Ok((more, _)) = scan_symbols(&cuda, &ops) {
                for (op, list) in more {
                    let entry = symbols.entry(op).or_default();
                    for mut s in list {
                        s.role = format!("{} (CUDA)", s.role);
                        if !entry.iter().any(|e| e.mangled == s.mangled) && entry.len() < 60 {
                            entry.push(s);
                        }
                    }
                }
            }
        }
        Ok(Index {
            torch_dir: torch_dir.display().to_string(),
            library: library.display().to_string(),
            ops,
            symbols,
            has_debug_info,
        })
    }

    fn cache_key(torch_dir: &Path) -> Option<String> {
        let lib = torch_dir.join("lib/libtorch_cpu.so");
        let m = std::fs::metadata(&lib).ok()?;
        let mtime = m
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs();
        let mut h: u64 = 0xcbf29ce484222325;
        for b in format!(
            "{}:{}:{mtime}:{}",
            lib.display(),
            m.len(),
            env!("CARGO_PKG_VERSION")
        )
        .bytes()
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
        Some(format!("{h:016x}"))
    }

    /// The cached index for this install, or a fresh one (then cached). Returns whether it came
    /// from the cache.
    pub fn load_or_build(torch_dir: &Path, cache_dir: &Path) -> Result<(Index, bool), NativeError> {
        let key = Self::cache_key(torch_dir);
        let path = key
            .as_ref()
            .map(|k| cache_dir.join(format!("where-{k}.json")));
        if let Some(p) = &path {
            if let Ok(text) = std::fs::read_to_string(p) {
                if let Ok(ix) = serde_json::from_str::<Index>(&text) {
                    return Ok((ix, true));
                }
            }
        }
        let ix = Self::build(torch_dir)?;
        if let Some(p) = &path {
            let _ = std::fs::create_dir_all(cache_dir);
            let tmp = p.with_extension("tmp");
            if std::fs::write(&tmp, serde_json::to_string(&ix).unwrap_or_default()).is_ok() {
                let _ = std::fs::rename(&tmp, p);
            }
        }
        Ok((ix, false))
    }
}

/// What a user typed, reduced to an ATen op name: `torch.relu`, `Tensor.add_`, `F.conv2d`,
/// `torch.nn.functional.conv2d`, `aten::addmm.out`, `relu`.
pub fn normalize(name: &str) -> String {
    let mut n = name.trim();
    for p in [
        "aten::",
        "torch.ops.aten.",
        "torch.nn.functional.",
        "torch.Tensor.",
        "torch.",
        "Tensor.",
        "F.",
        "nn.functional.",
    ] {
        if let Some(rest) = n.strip_prefix(p) {
            n = rest;
            break;
        }
    }
    n.to_owned()
}

/// Edit distance counting a swap of neighbours as one edit (`rleu` is 1 from `relu`).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// The answer for one name.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub query: String,
    pub op: String,
    pub overloads: Vec<OpEntry>,
    pub symbols: Vec<Symbol>,
    /// gdb lines: exact mangled names (one pending breakpoint each), plus the failing-check ones.
    pub gdb: Vec<String>,
    pub vscode_breakpoints: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python_def: Option<(String, u32)>,
    pub line_level: bool,
}

impl Index {
    /// Every overload of `name` (`add` gives add.Tensor, add.Scalar, add.out ...; `add.out`
    /// just that one).
    pub fn lookup(&self, query: &str) -> Option<Answer> {
        let n = normalize(query);
        let exact_overload = n.contains('.');
        let overloads: Vec<OpEntry> = self
            .ops
            .iter()
            .filter(|o| {
                if exact_overload {
                    o.name == n
                } else {
                    base(&o.name) == n
                }
            })
            .cloned()
            .collect();
        if overloads.is_empty() {
            return None;
        }
        let b = base(&overloads[0].name).to_owned();
        let mut symbols = self.symbols.get(&b).cloned().unwrap_or_default();
        // The CPU kernel first (what runs on this machine), then the backward, the dispatcher
        // entry, and the other backends' kernels.
        let cpu: BTreeSet<String> = overloads
            .iter()
            .filter_map(|o| {
                o.dispatch
                    .get("CPU")
                    .or_else(|| o.dispatch.get("CompositeExplicitAutograd"))
            })
            .map(|k| format!("at::native::{k}("))
            .collect();
        symbols.sort_by_key(|s| {
            let rank = if cpu.iter().any(|k| s.demangled.starts_with(k.as_str())) {
                0
            } else {
                match s.role.as_str() {
                    "backward" => 1,
                    "dispatcher" => 2,
                    _ => 3,
                }
            };
            (rank, s.demangled.clone())
        });
        let mut gdb = vec![
            "set breakpoint pending on".to_owned(),
            "set pagination off".to_owned(),
            "handle SIGUSR1 SIGUSR2 SIGPIPE nostop noprint pass".to_owned(),
        ];
        for s in symbols
            .iter()
            .filter(|s| s.role != "dispatcher" && !s.role.ends_with("(CUDA)"))
            .take(12)
        {
            gdb.push(format!("break {}    # {}", s.mangled, s.demangled));
        }
        gdb.push("# stop at any failing TORCH_CHECK / C++ throw instead:".to_owned());
        gdb.push("# break c10::detail::torchCheckFail".to_owned());
        gdb.push("# catch throw".to_owned());
        let vscode_breakpoints = symbols
            .iter()
            .filter(|s| s.role != "dispatcher")
            .map(|s| {
                s.demangled
                    .split('(')
                    .next()
                    .unwrap_or(&s.demangled)
                    .to_owned()
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        Some(Answer {
            query: query.to_owned(),
            op: b,
            overloads,
            symbols,
            gdb,
            vscode_breakpoints,
            python_def: None,
            line_level: self.has_debug_info,
        })
    }

    /// Op names closest to `query` (for an unknown name).
    pub fn closest(&self, query: &str, n: usize) -> Vec<String> {
        let q = normalize(query);
        let mut names: Vec<&str> = self.ops.iter().map(|o| base(&o.name)).collect();
        names.sort_unstable();
        names.dedup();
        let mut scored: Vec<(usize, &str)> = names
            .into_iter()
            .map(|name| {
                let d = distance(&q, name);
                (
                    if name.contains(q.as_str()) || q.contains(name) {
                        d.min(2)
                    } else {
                        d
                    },
                    name,
                )
            })
            .collect();
        scored.sort();
        scored
            .into_iter()
            .take(n)
            .map(|(_, s)| s.to_owned())
            .collect()
    }
}

/// Where each kernel is defined in a PyTorch checkout: `aten/src/ATen/native/**/*.{cpp,cu,h}`
/// lines that start a definition of `at::native::<kernel>` (`Tensor relu(const Tensor& self) {`,
/// not declarations ending in `;`, not calls). Returns (kernel, file, line).
pub fn kernel_sources(checkout: &Path, kernels: &[String]) -> Vec<(String, String, u32)> {
    let root = checkout.join("aten/src/ATen/native");
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if !p
                .extension()
                .is_some_and(|x| x == "cpp" || x == "cu" || x == "h")
            {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            for (i, line) in text.lines().enumerate() {
                if line.starts_with(char::is_whitespace) || line.trim_end().ends_with(';') {
                    continue;
                }
                for k in kernels {
                    let needle = format!(" {k}(");
                    let amp = format!("&{k}(");
                    if (line.contains(&needle)
                        || line.contains(&amp)
                        || line.starts_with(&format!("{k}(")))
                        && !line.contains("return ")
                    {
                        out.push((k.clone(), p.display().to_string(), i as u32 + 1));
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `def NAME(` in a Python file: the line of a wrapper written in Python.
pub fn python_def(file: &Path, name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(file).ok()?;
    let needle = format!("def {name}(");
    text.lines()
        .position(|l| l.trim_start().starts_with(&needle) && !l.starts_with(' '))
        .map(|i| i as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NATIVE: &str = "- func: relu(Tensor self) -> Tensor\n  device_check: NoCheck\n  variants: function, method\n  dispatch:\n    CPU, CUDA: relu\n    MkldnnCPU: mkldnn_relu\n- func: relu_(Tensor(a!) self) -> Tensor(a!)\n  dispatch:\n    CPU, CUDA: relu_\n- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\n  structured_delegate: add.out\n- func: add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)\n  structured: True\n  dispatch:\n    CPU, CUDA: add_out\n";
    const DERS: &str = "- name: relu(Tensor self) -> Tensor\n  self: threshold_backward(grad, result, 0)\n  result: auto_element_wise\n- name: add.Tensor(Tensor self, Tensor other, *, Scalar alpha) -> Tensor\n  self: handle_r_to_c(self.scalar_type(), grad)\n  other: handle_r_to_c(other.scalar_type(), maybe_multiply(grad, alpha.conj()))\n";

    #[test]
    fn yaml_gives_overloads_dispatch_and_formulas() {
        let ops = parse_yaml(NATIVE, DERS).unwrap();
        let relu = ops.iter().find(|o| o.name == "relu").unwrap();
        assert_eq!(relu.dispatch["CPU"], "relu");
        assert_eq!(relu.dispatch["MkldnnCPU"], "mkldnn_relu");
        assert_eq!(
            relu.derivatives["self"],
            "threshold_backward(grad, result, 0)"
        );
        assert_eq!(relu.backward_node.as_deref(), Some("ReluBackward0"));
        let add = ops.iter().find(|o| o.name == "add.Tensor").unwrap();
        assert_eq!(add.structured_delegate.as_deref(), Some("add.out"));
        assert_eq!(add.backward_node.as_deref(), Some("AddBackward0"));
    }

    #[test]
    fn names_normalize_and_unknown_ones_get_suggestions() {
        for q in [
            "torch.relu",
            "Tensor.relu",
            "F.relu",
            "torch.nn.functional.relu",
            "aten::relu",
            "relu",
        ] {
            assert_eq!(normalize(q), "relu", "{q}");
        }
        assert_eq!(normalize("aten::addmm.out"), "addmm.out");
        let ix = Index {
            ops: parse_yaml(NATIVE, DERS).unwrap(),
            ..Default::default()
        };
        assert!(ix.lookup("torch.rleu").is_none());
        assert_eq!(ix.closest("torch.rleu", 2)[0], "relu");
        let a = ix.lookup("aten::add.out").unwrap();
        assert_eq!(a.overloads.len(), 1);
        assert_eq!(ix.lookup("torch.add").unwrap().overloads.len(), 2);
    }

    #[test]
    fn kernel_definitions_in_a_checkout() {
        let dir = tempfile::tempdir().unwrap();
        let native = dir.path().join("aten/src/ATen/native");
        std::fs::create_dir_all(&native).unwrap();
        std::fs::write(
            native.join("Activation.cpp"),
            "Tensor relu(const Tensor & self);\nTensor relu(const Tensor & self) {\n  return clamp_min(self, 0);\n}\nTensor& relu_(Tensor& self) {\n  return self;\n}\n",
        )
        .unwrap();
        let found = kernel_sources(dir.path(), &["relu".into(), "relu_".into()]);
        let lines: Vec<(String, u32)> = found.into_iter().map(|(k, _, l)| (k, l)).collect();
        assert_eq!(lines, vec![("relu".into(), 2), ("relu_".into(), 5)]);
    }

    #[test]
    fn mangled_identifiers() {
        assert_eq!(next_ident("4reluERKNS_6TensorE"), Some("relu"));
        assert_eq!(backward_node("_softmax"), "SoftmaxBackward0");
        assert_eq!(backward_node("addmm.out"), "AddmmBackward0");
    }

    #[test]
    fn a_non_elf_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("libtorch_cpu.so");
        std::fs::write(&f, b"not an elf file at all").unwrap();
        let err = scan_symbols(&f, &[]).unwrap_err().to_string();
        assert!(err.contains("is not a readable ELF file"), "{err}");
        let err = scan_symbols(&dir.path().join("missing.so"), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot open"), "{err}");
    }
}

/// What an ELF library carries for a debugger.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ElfInfo {
    pub path: String,
    /// `.debug_info` present: line-level breakpoints possible.
    pub dwarf: bool,
    /// `.symtab` or `.dynsym` present: breakpoints by function name possible.
    pub symbols: bool,
    /// Strings of the `.comment` section (the compilers that built it).
    pub compilers: Vec<String>,
}

/// Reads what a debugger needs to know about `path` (DWARF, symbols, compilers).
pub fn elf_info(path: &Path) -> Result<ElfInfo, NativeError> {
    use object::{Object, ObjectSection};
    let file = std::fs::File::open(path)
        .map_err(|e| NativeError::Io(format!("cannot open {}: {e}", path.display())))?;
    // SAFETY: read-only mapping of a library file, only read while mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| NativeError::Io(format!("cannot map {}: {e}", path.display())))?;
    let obj = object::File::parse(&*map).map_err(|e| {
        NativeError::Format(format!(
            "{} is not a readable ELF file: {e}",
            path.display()
        ))
    })?;
    let has = |name: &str| obj.section_by_name(name).is_some_and(|s| s.size() > 0);
    let compilers = obj
        .section_by_name(".comment")
        .and_then(|s| s.data().ok())
        .map(|d| {
            d.split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).trim().to_owned())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        })
        .unwrap_or_default();
    Ok(ElfInfo {
        path: path.display().to_string(),
        dwarf: has(".debug_info"),
        symbols: has(".symtab") || has(".dynsym"),
        compilers,
    })
}

/// `GCC: (GNU) 13.3.1 20240611 (Red Hat 13.3.1-2)` -> `13.3.1`; the GCC that built most of it.
pub fn gcc_version(compilers: &[String]) -> Option<String> {
    compilers
        .iter()
        .filter_map(|c| c.strip_prefix("GCC: "))
        .filter_map(|c| {
            c.split_whitespace()
                .find(|w| w.chars().next().is_some_and(|ch| ch.is_ascii_digit()))
        })
        .max_by_key(|v| {
            v.split('.')
                .map(|p| p.parse::<u32>().unwrap_or(0))
                .collect::<Vec<_>>()
        })
        .map(str::to_owned)
}

#[cfg(test)]
mod elf_tests {
    use super::*;

    #[test]
    fn gcc_version_of_the_comment_section() {
        let c = vec![
            "GCC: (GNU) 13.3.1 20240611 (Red Hat 13.3.1-2)".to_owned(),
            "GCC: (GNU) 7.5.0".to_owned(),
            "Intel(R) oneAPI DPC++/C++ Compiler 2024.2.0".to_owned(),
        ];
        assert_eq!(gcc_version(&c).as_deref(), Some("13.3.1"));
        assert_eq!(gcc_version(&[]), None);
    }

    #[test]
    fn truncated_and_non_elf_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.so");
        std::fs::write(&f, b"\x7fELF\x02\x01\x01").unwrap();
        assert!(elf_info(&f)
            .unwrap_err()
            .to_string()
            .contains("not a readable ELF"));
    }
}
