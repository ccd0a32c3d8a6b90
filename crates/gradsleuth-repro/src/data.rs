//! The tensor-aware first pass: data loading replaced by seeded random tensors, pretrained
//! loading by construction from the config.
//!
//! A *site* is where a script takes values from outside its computation: a `for` loop's
//! variables (`for x, y in loader:`, `for i, batch in enumerate(loader):`) and an assignment from
//! `next(...)` or `....from_pretrained(...)`. The caller runs the script once
//! [instrumented](instrument): each site reports the first value it sees to
//! `gradsleuth._oracle.observe`, which describes it ([`Value`]: a tensor's shape, dtype, device
//! and value range; numbers and strings as literals; tuples, lists and string-keyed dicts of
//! those; a Hugging Face model as its class and the config entries that differ from the
//! defaults). A site whose value can be rebuilt is then [substituted](substitute): the loop
//! iterates over one rebuilt value, the assignment takes it. Each substitution is kept only if
//! the oracle still shows the finding, so a bug that lives in the data pipeline keeps it; the
//! dataset, loader and file reading then become dead code that the reduction removes.

use std::collections::BTreeMap;

use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::Ranged;
use serde::{Deserialize, Serialize};

/// A place that takes values from outside the computation.
#[derive(Debug, Clone, PartialEq)]
pub struct Site {
    pub id: usize,
    /// 1-based line of the statement.
    pub line: usize,
    /// The bound target's source text (`x, y`).
    pub target: String,
    kind: Kind,
    /// Byte range of the value to replace (the loop's iterable, the assignment's value).
    value: (usize, usize),
    /// Where the observation goes: a byte offset at a line start, and the indentation.
    observe_at: usize,
    indent: String,
}

impl Site {
    /// A loop (else an assignment).
    pub fn is_loop(&self) -> bool {
        self.kind == Kind::Loop
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Loop,
    Assign,
}

/// A value as `observe` describes it (`gradsleuth._core.observe`, which writes it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Value {
    Tensor(TensorValue),
    /// A Python literal (`3`, `0.5`, `'train'`, `None`, `True`).
    Literal(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(String, Value)>),
    Model(ModelValue),
    /// Not rebuildable (the type's name).
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorValue {
    pub shape: Vec<u64>,
    /// `float32`, `int64`, `bool`, ...
    pub dtype: String,
    #[serde(default = "cpu")]
    pub device: String,
    #[serde(default)]
    pub grad: bool,
    /// The smallest and largest element (absent for empty or complex tensors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

fn cpu() -> String {
    "cpu".into()
}

/// A model built by `from_pretrained`: rebuilt from its config with random weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelValue {
    /// `transformers.BertForSequenceClassification`: importable as written.
    pub class: String,
    /// `transformers.BertConfig`.
    pub config_class: String,
    /// The config entries that differ from the config class's defaults.
    pub config: BTreeMap<String, serde_json::Value>,
}

/// The sites of `source`, in source order; none when it does not parse.
pub fn sites(source: &str) -> Vec<Site> {
    let Ok(parsed) = ruff_python_parser::parse_module(source) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    walk(source, &parsed.syntax().body, &mut out);
    out
}

fn line_start(source: &str, offset: usize) -> usize {
    source[..offset].rfind('\n').map_or(0, |i| i + 1)
}

fn line_no(source: &str, offset: usize) -> usize {
    source[..offset].matches('\n').count() + 1
}

fn indent_at(source: &str, offset: usize) -> String {
    let start = line_start(source, offset);
    source[start..]
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect()
}

/// Whether `e` is `next(...)` or `X.from_pretrained(...)`.
fn takes_outside_value(e: &Expr) -> bool {
    let Expr::Call(c) = e else { return false };
    match c.func.as_ref() {
        Expr::Name(n) => n.id.as_str() == "next",
        Expr::Attribute(a) => a.attr.as_str() == "from_pretrained",
        _ => false,
    }
}

fn walk(source: &str, body: &[Stmt], out: &mut Vec<Site>) {
    for s in body {
        match s {
            Stmt::For(f) if !f.is_async => {
                if let Some(first) = f.body.first() {
                    let start = first.range().start().to_usize();
                    // `for x in xs: f(x)` on one line has no line to observe from.
                    if line_no(source, start) > line_no(source, f.range().start().to_usize()) {
                        out.push(Site {
                            id: out.len(),
                            line: line_no(source, f.range().start().to_usize()),
                            target: source[f.target.range()].to_owned(),
                            kind: Kind::Loop,
                            value: (
                                f.iter.range().start().to_usize(),
                                f.iter.range().end().to_usize(),
                            ),
                            observe_at: line_start(source, start),
                            indent: indent_at(source, start),
                        });
                    }
                }
            }
            Stmt::Assign(a) if a.targets.len() == 1 && takes_outside_value(&a.value) => {
                let end = s.range().end().to_usize();
                let next_line = source[end..].find('\n').map(|i| end + i + 1);
                let start = s.range().start().to_usize();
                // Only a statement alone on its line(s) (not `a = next(it); b = 1`).
                let alone = source[end..]
                    .split('\n')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .is_empty()
                    && source[line_start(source, start)..start].trim().is_empty();
                if let (Some(at), true) = (next_line, alone) {
                    out.push(Site {
                        id: out.len(),
                        line: line_no(source, start),
                        target: source[a.targets[0].range()].to_owned(),
                        kind: Kind::Assign,
                        value: (
                            a.value.range().start().to_usize(),
                            a.value.range().end().to_usize(),
                        ),
                        observe_at: at,
                        indent: indent_at(source, start),
                    });
                }
            }
            _ => {}
        }
        for b in bodies(s) {
            walk(source, b, out);
        }
    }
}

/// The suites directly inside a statement (a function's and a class's bodies too).
pub(crate) fn bodies(s: &Stmt) -> Vec<&[Stmt]> {
    match s {
        Stmt::FunctionDef(f) => vec![&f.body],
        Stmt::ClassDef(c) => vec![&c.body],
        Stmt::For(f) => vec![&f.body, &f.orelse],
        Stmt::While(w) => vec![&w.body, &w.orelse],
        Stmt::If(i) => std::iter::once(i.body.as_slice())
            .chain(i.elif_else_clauses.iter().map(|c| c.body.as_slice()))
            .collect(),
        Stmt::With(w) => vec![&w.body],
        Stmt::Try(t) => {
            let mut v: Vec<&[Stmt]> = vec![&t.body, &t.orelse, &t.finalbody];
            for h in &t.handlers {
                let ruff_python_ast::ExceptHandler::ExceptHandler(h) = h;
                v.push(&h.body);
            }
            v
        }
        Stmt::Match(m) => m.cases.iter().map(|c| c.body.as_slice()).collect(),
        _ => Vec::new(),
    }
}

/// `source` with each site reporting its first value: a line
/// `__import__("gradsleuth._oracle", fromlist=["observe"]).observe(ID, (TARGET))` at the top of
/// a loop's body, after an assignment.
pub fn instrument(source: &str, sites: &[Site]) -> String {
    let mut inserts: Vec<(usize, String)> = sites
        .iter()
        .map(|s| {
            (
                s.observe_at,
                format!(
                    "{}__import__(\"gradsleuth._oracle\", fromlist=[\"observe\"]).observe({}, ({}))\n",
                    s.indent, s.id, s.target
                ),
            )
        })
        .collect();
    inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
    let mut out = source.to_owned();
    for (at, text) in inserts {
        out.insert_str(at, &text);
    }
    out
}

/// The observations a run wrote (`{"site": ID, "value": ...}` per line); bad lines skipped.
pub fn observations(text: &str) -> BTreeMap<usize, Value> {
    #[derive(Deserialize)]
    struct Line {
        site: usize,
        value: Value,
    }
    text.lines()
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
        .map(|l| (l.site, l.value))
        .collect()
}

/// A number as short Python source: integral values without a fraction, others to 4
/// significant decimals.
fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        let s = format!("{x:.4}");
        let s = s.trim_end_matches('0');
        s.strip_suffix('.').unwrap_or(s).to_owned()
    }
}

fn shape(s: &[u64]) -> String {
    match s {
        [] => "()".into(),
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            s.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn is_float(dtype: &str) -> bool {
    matches!(dtype, "float16" | "bfloat16" | "float32" | "float64")
}

fn is_int(dtype: &str) -> bool {
    matches!(
        dtype,
        "uint8" | "int8" | "int16" | "int32" | "int64" | "uint16" | "uint32" | "uint64"
    )
}

/// Python source that builds a tensor like `t`: values drawn uniformly from its observed
/// range (integers and booleans as `randint`, a constant tensor as `full`).
fn tensor(t: &TensorValue) -> Option<String> {
    let float = is_float(&t.dtype);
    let int = is_int(&t.dtype);
    let boolean = t.dtype == "bool";
    if !(float || int || boolean) {
        return None;
    }
    let mut kw = Vec::new();
    let default = if float { "float32" } else { "int64" };
    if t.dtype != default || boolean {
        kw.push(format!("dtype=torch.{}", t.dtype));
    }
    if t.device != "cpu" {
        kw.push(format!("device={:?}", t.device));
    }
    let kw = |extra: &[String]| -> String {
        extra
            .iter()
            .chain(kw.iter())
            .map(|s| format!(", {s}"))
            .collect()
    };
    let dims = shape(&t.shape);
    let mut code = match (t.min, t.max) {
        (Some(lo), Some(hi)) if lo.is_finite() && hi.is_finite() => {
            if lo == hi {
                let v = if boolean {
                    (if lo != 0.0 { "True" } else { "False" }).to_owned()
                } else if float && lo.fract() == 0.0 {
                    format!("{}.0", number(lo))
                } else {
                    number(lo)
                };
                format!("torch.full({dims}, {v}{})", kw(&[]))
            } else if float {
                format!(
                    "torch.empty({dims}{}).uniform_({}, {})",
                    kw(&[]),
                    number(lo),
                    number(hi)
                )
            } else {
                format!(
                    "torch.randint({}, {}, {dims}{})",
                    number(lo.floor()),
                    number(hi.floor() + 1.0),
                    kw(&[])
                )
            }
        }
        // Empty, or a range that is not finite: the shape and dtype are what matter.
        _ if float => format!("torch.randn({dims}{})", kw(&[])),
        _ => format!("torch.zeros({dims}{})", kw(&[])),
    };
    if t.grad {
        code.push_str(".requires_grad_()");
    }
    Some(code)
}

/// Python source for a JSON value (a config entry).
fn json_literal(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "None".into(),
        serde_json::Value::Bool(b) => (if *b { "True" } else { "False" }).into(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) => format!("{s:?}"),
        serde_json::Value::Array(a) => {
            format!(
                "[{}]",
                a.iter().map(json_literal).collect::<Vec<_>>().join(", ")
            )
        }
        serde_json::Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{k:?}: {}", json_literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Python source that rebuilds `v`, and the top-level modules it needs; None when some part
/// cannot be rebuilt.
pub fn render(v: &Value) -> Option<(String, Vec<String>)> {
    let mut modules = Vec::new();
    let code = render_into(v, &mut modules)?;
    Some((code, modules))
}

fn render_into(v: &Value, modules: &mut Vec<String>) -> Option<String> {
    let mut need = |m: &str| {
        if !modules.iter().any(|x| x == m) {
            modules.push(m.to_owned());
        }
    };
    Some(match v {
        Value::Tensor(t) => {
            need("torch");
            tensor(t)?
        }
        Value::Literal(s) => s.clone(),
        Value::Tuple(items) => {
            let parts = items
                .iter()
                .map(|i| render_into(i, modules))
                .collect::<Option<Vec<_>>>()?;
            if parts.len() == 1 {
                format!("({},)", parts[0])
            } else {
                format!("({})", parts.join(", "))
            }
        }
        Value::List(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| render_into(i, modules))
                .collect::<Option<Vec<_>>>()?
                .join(", ")
        ),
        Value::Dict(items) => format!(
            "{{{}}}",
            items
                .iter()
                .map(|(k, i)| Some(format!("{k:?}: {}", render_into(i, modules)?)))
                .collect::<Option<Vec<_>>>()?
                .join(", ")
        ),
        Value::Model(m) => {
            for path in [&m.class, &m.config_class] {
                let module = path.split('.').next()?;
                if module == path.as_str() {
                    return None;
                }
                need(module);
            }
            let entries = m
                .config
                .iter()
                .map(|(k, v)| format!("{k}={}", json_literal(v)))
                .collect::<Vec<_>>()
                .join(", ");
            format!("{}({}({entries}))", m.class, m.config_class)
        }
        Value::Other(_) => return None,
    })
}

/// Whether a module-level statement is a docstring or a `from __future__` import (what must
/// stay before anything added at the top).
fn prelude(i: usize, s: &Stmt) -> bool {
    match s {
        Stmt::Expr(e) => i == 0 && matches!(e.value.as_ref(), Expr::StringLiteral(_)),
        Stmt::ImportFrom(f) => f
            .module
            .as_ref()
            .is_some_and(|m| m.as_str() == "__future__"),
        _ => false,
    }
}

/// Where code may go first in `source`: after its docstring and `__future__` imports (at the
/// start of the line of the first other statement).
pub fn prelude_end(source: &str) -> Option<usize> {
    let parsed = ruff_python_parser::parse_module(source).ok()?;
    Some(after_prelude(source, &parsed.syntax().body))
}

fn after_prelude(source: &str, body: &[Stmt]) -> usize {
    body.iter()
        .enumerate()
        .find(|(i, s)| !prelude(*i, s))
        .map_or(source.len(), |(_, s)| {
            line_start(source, s.range().start().to_usize())
        })
}

/// `source` with `import M` added after its prelude for each of `modules` it does not import at
/// top level already.
pub fn with_imports(source: &str, modules: &[String]) -> Option<String> {
    let parsed = ruff_python_parser::parse_module(source).ok()?;
    let body = &parsed.syntax().body;
    let imported = |m: &str| {
        body.iter().any(|s| {
            matches!(s, Stmt::Import(i) if i.names.iter().any(|a| a.name.as_str() == m && a.asname.is_none()))
        })
    };
    let missing: Vec<String> = modules
        .iter()
        .filter(|m| !imported(m))
        .map(|m| format!("import {m}"))
        .collect();
    Some(put_first(source, body, &missing))
}

/// The module-level import statements of `before` (their source text) that `after` no longer
/// has: what a reduction dropped. Under the reducer's server a dropped import of an installed
/// module changes nothing (the server imported it already), run alone it may (an import
/// that registers something the program relies on).
pub fn dropped_imports(before: &str, after: &str) -> Vec<String> {
    let imports = |source: &str| -> Vec<String> {
        ruff_python_parser::parse_module(source)
            .map(|p| {
                p.syntax()
                    .body
                    .iter()
                    .filter(|s| matches!(s, Stmt::Import(_) | Stmt::ImportFrom(_)))
                    .filter(|s| !prelude(1, s))
                    .map(|s| source[s.range()].to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let kept = imports(after);
    let mut out = Vec::new();
    for s in imports(before) {
        if !kept.contains(&s) && !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// `source` with `statements` (module-level statements' text) put after its prelude.
pub fn with_statements(source: &str, statements: &[String]) -> Option<String> {
    let parsed = ruff_python_parser::parse_module(source).ok()?;
    Some(put_first(source, &parsed.syntax().body, statements))
}

fn put_first(source: &str, body: &[Stmt], statements: &[String]) -> String {
    if statements.is_empty() {
        return source.to_owned();
    }
    let at = after_prelude(source, body);
    let lines: String = statements.iter().map(|m| format!("{m}\n")).collect();
    let mut out = source.to_owned();
    if at == source.len() && !source.ends_with('\n') && !source.is_empty() {
        out.push('\n');
        out.push_str(&lines);
    } else {
        out.insert_str(at, &lines);
    }
    out
}

/// `source` with `site` fed the rebuilt `value`: a loop iterates over `[VALUE] * repeat`
/// (`[VALUE]` when `repeat` is 1), an assignment takes `VALUE`; and the modules the value's
/// code needs (see [`with_imports`]). Only the text after the site's start changes, so sites
/// before it stay valid. None when the value cannot be rebuilt (or the site is not in
/// `source`).
pub fn substitute(
    source: &str,
    site: &Site,
    value: &Value,
    repeat: u32,
) -> Option<(String, Vec<String>)> {
    if !contains_tensor_or_model(value) {
        return None;
    }
    let (code, modules) = render(value)?;
    let replacement = match site.kind {
        Kind::Loop if repeat > 1 => format!("[{code}] * {repeat}"),
        Kind::Loop => format!("[{code}]"),
        Kind::Assign => code,
    };
    let (a, b) = site.value;
    if b > source.len() {
        return None;
    }
    let mut out = String::with_capacity(source.len() + replacement.len());
    out.push_str(&source[..a]);
    out.push_str(&replacement);
    out.push_str(&source[b..]);
    Some((out, modules))
}

/// Values with no tensor or model (an epoch counter, a file name) are not data: left as they
/// are.
fn contains_tensor_or_model(v: &Value) -> bool {
    match v {
        Value::Tensor(_) | Value::Model(_) => true,
        Value::Tuple(i) | Value::List(i) => i.iter().any(contains_tensor_or_model),
        Value::Dict(i) => i.iter().any(|(_, v)| contains_tensor_or_model(v)),
        Value::Literal(_) | Value::Other(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = r#""""Trains."""
from __future__ import annotations
import torch
from torch.utils.data import DataLoader
from transformers import AutoModel

loader = DataLoader(ds, batch_size=4)
model = AutoModel.from_pretrained("./ckpt")
for epoch in range(3):
    for i, (x, y) in enumerate(loader):
        loss = model(x, y)
batch = next(iter(loader))
for z in loader: print(z)
"#;

    fn obs(json: &str) -> Value {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn finds_loops_and_outside_assignments_and_instruments_them() {
        let s = sites(SCRIPT);
        let got: Vec<(usize, &str, Kind)> = s
            .iter()
            .map(|s| (s.line, s.target.as_str(), s.kind))
            .collect();
        assert_eq!(
            got,
            vec![
                (8, "model", Kind::Assign),
                (9, "epoch", Kind::Loop),
                (10, "i, (x, y)", Kind::Loop),
                (12, "batch", Kind::Assign),
            ]
        );
        let inst = instrument(SCRIPT, &s);
        assert!(
            inst.contains("        __import__(\"gradsleuth._oracle\", fromlist=[\"observe\"]).observe(2, (i, (x, y)))\n        loss = model(x, y)\n"),
            "{inst}"
        );
        assert!(inst.contains("batch = next(iter(loader))\n__import__(\"gradsleuth._oracle\", fromlist=[\"observe\"]).observe(3, (batch))\n"), "{inst}");
        assert!(ruff_python_parser::parse_module(&inst).is_ok());
    }

    #[test]
    fn rebuilds_batches_and_models() {
        let s = sites(SCRIPT);
        let batch = obs(r#"{"tuple": [{"literal": "0"}, {"list": [
                {"tensor": {"shape": [4, 3, 8, 8], "dtype": "float32", "min": -0.5, "max": 1.0}},
                {"tensor": {"shape": [4], "dtype": "int64", "min": 0, "max": 9}}]}]}"#);
        let sub = |site: &Site, v: &Value, repeat: u32| {
            substitute(SCRIPT, site, v, repeat).and_then(|(src, m)| with_imports(&src, &m))
        };
        let out = sub(&s[2], &batch, 1).unwrap();
        assert!(
            out.contains("for i, (x, y) in [(0, [torch.empty((4, 3, 8, 8)).uniform_(-0.5, 1), torch.randint(0, 10, (4,))])]:"),
            "{out}"
        );
        // torch is imported already: nothing added.
        assert_eq!(out.matches("import torch\n").count(), 1);
        let model = obs(
            r#"{"model": {"class": "transformers.BertModel", "config_class": "transformers.BertConfig",
               "config": {"hidden_size": 32, "num_hidden_layers": 2, "id2label": {"0": "a"}, "tie": true}}}"#,
        );
        let out = sub(&s[0], &model, 1).unwrap();
        assert!(
            out.contains("model = transformers.BertModel(transformers.BertConfig(hidden_size=32, id2label={\"0\": \"a\"}, num_hidden_layers=2, tie=True))"),
            "{out}"
        );
        // The import goes after the docstring and the __future__ import.
        assert!(
            out.starts_with("\"\"\"Trains.\"\"\"\nfrom __future__ import annotations\nimport transformers\nimport torch\n"),
            "{out}"
        );
        // An epoch counter is not data; a value with an object in it cannot be rebuilt.
        assert_eq!(sub(&s[1], &obs(r#"{"literal": "0"}"#), 1), None);
        let mixed = obs(
            r#"{"tuple": [{"other": "PIL.Image"}, {"tensor": {"shape": [], "dtype": "int64", "min": 1, "max": 1}}]}"#,
        );
        assert_eq!(sub(&s[2], &mixed, 1), None);
    }

    #[test]
    fn tensors_keep_dtype_range_device_and_grad() {
        let t = |j: &str| tensor(&serde_json::from_str::<TensorValue>(j).unwrap());
        assert_eq!(
            t(r#"{"shape": [2, 5], "dtype": "bool", "min": 0, "max": 1}"#).unwrap(),
            "torch.randint(0, 2, (2, 5), dtype=torch.bool)"
        );
        assert_eq!(
            t(r#"{"shape": [2, 5], "dtype": "int64", "min": 1, "max": 1}"#).unwrap(),
            "torch.full((2, 5), 1)"
        );
        assert_eq!(
            t(r#"{"shape": [3], "dtype": "float64", "min": 0.25, "max": 0.25, "device": "cuda:0", "grad": true}"#)
                .unwrap(),
            "torch.full((3,), 0.25, dtype=torch.float64, device=\"cuda:0\").requires_grad_()"
        );
        assert_eq!(
            t(r#"{"shape": [0, 4], "dtype": "float32"}"#).unwrap(),
            "torch.randn((0, 4))"
        );
        assert_eq!(t(r#"{"shape": [2], "dtype": "complex64"}"#), None);
        assert_eq!(
            t(r#"{"shape": [2], "dtype": "float16", "min": 0.12345, "max": 3}"#).unwrap(),
            "torch.empty((2,), dtype=torch.float16).uniform_(0.1235, 3)"
        );
    }

    #[test]
    fn repeated_loops_and_observation_lines() {
        let s = sites("for x in xs:\n    f(x)\n");
        let v = obs(r#"{"tensor": {"shape": [1], "dtype": "float32", "min": 0, "max": 2}}"#);
        let (src, modules) = substitute("for x in xs:\n    f(x)\n", &s[0], &v, 2).unwrap();
        assert_eq!(
            with_imports(&src, &modules).unwrap(),
            "import torch\nfor x in [torch.empty((1,)).uniform_(0, 2)] * 2:\n    f(x)\n"
        );
        let o = observations("{\"site\": 1, \"value\": {\"literal\": \"3\"}}\nnot json\n");
        assert_eq!(o.get(&1), Some(&Value::Literal("3".into())));
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn imports_a_reduction_dropped_go_back_after_the_prelude() {
        let before = "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nimport torch\nimport torchvision\nfrom torch import (\n    nn,\n)\nx = 1\nif x:\n    import os\n";
        let after = "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nimport torch\nx = 1\n";
        let dropped = dropped_imports(before, after);
        assert_eq!(
            dropped,
            ["import torchvision", "from torch import (\n    nn,\n)"]
        );
        assert_eq!(
            with_statements(after, &dropped).unwrap(),
            "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\nimport torchvision\nfrom torch import (\n    nn,\n)\nimport torch\nx = 1\n"
        );
        assert!(dropped_imports(after, after).is_empty());
    }
}
