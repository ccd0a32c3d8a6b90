//! Names as the rules spell them, whatever the file's imports.
//!
//! The rules recognise torch by its usual spelling: `torch.no_grad()`, `torch.tensor(t)`,
//! `nn.Linear(...)`, `F.relu(x)`, `np.asarray(x)`. A file may import the same objects under
//! other names (`from torch import no_grad, tensor`, `from torch.nn import Linear, ModuleList`,
//! `import torch as th`, `import torch.nn.functional as fn`, `import numpy`), and a rule that
//! read only the usual spelling missed the bug there, or, worse, raised a false alarm (a
//! `with no_grad():` evaluation block not known for one). Before any rule runs, every use of a
//! name bound by such an import is rewritten, in the syntax tree only, to the usual spelling of
//! what it names; the rewritten nodes keep the range of the name they replace, so locations,
//! snippets and fixes still show the user's own text.
//!
//! A tensor method called through the class (`torch.Tensor.detach(h)`, `Tensor.item(x)`) or
//! through the torch function that is the method (`torch.detach(h)`) is rewritten to the method
//! called on its first argument (`h.detach()`), the way every rule reads it.
//!
//! A name the file binds anywhere else too (an assignment, a parameter, a loop target, a
//! definition, another import) is left alone: which object it holds at a given use would need
//! the flow of the whole file.

use std::collections::HashMap;

use ruff_python_ast::visitor::transformer::{self, Transformer};
use ruff_python_ast::visitor::{self as visitor, Visitor};
use ruff_python_ast::{
    AtomicNodeIndex, Expr, ExprAttribute, ExprContext, ExprName, Identifier, ModModule, Stmt,
};
use ruff_text_size::{Ranged, TextRange};

/// The usual spelling of a full dotted path under the modules the rules read.
fn usual(path: &str) -> String {
    const SHORT: &[(&str, &str)] = &[
        ("torch.nn.functional", "F"),
        // `torch.nn.parameter.Parameter` is `nn.Parameter`.
        ("torch.nn.parameter", "nn"),
        ("torch.nn", "nn"),
        ("numpy", "np"),
    ];
    for (full, short) in SHORT {
        if path == *full {
            return (*short).to_owned();
        }
        if let Some(rest) = path.strip_prefix(full).and_then(|r| r.strip_prefix('.')) {
            return format!("{short}.{rest}");
        }
    }
    path.to_owned()
}

/// The modules whose names are rewritten: torch's own namespaces the rules know, and numpy.
fn read_by_rules(module: &str) -> bool {
    module == "torch"
        || module == "numpy"
        || [
            "torch.nn",
            "torch.optim",
            "torch.autograd",
            "torch.nn.functional",
        ]
        .iter()
        .any(|m| module == *m || module.starts_with(&format!("{m}.")))
}

/// Every name the file binds, with how often (imports counted like any other binding).
fn bindings(module: &ModModule) -> HashMap<String, usize> {
    struct Bound(HashMap<String, usize>);
    impl Bound {
        fn add(&mut self, name: &str) {
            *self.0.entry(name.to_owned()).or_default() += 1;
        }
    }
    impl<'a> Visitor<'a> for Bound {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            match s {
                Stmt::FunctionDef(f) => self.add(f.name.id.as_str()),
                Stmt::ClassDef(c) => self.add(c.name.id.as_str()),
                Stmt::Import(i) => {
                    for a in &i.names {
                        match &a.asname {
                            Some(n) => self.add(n.id.as_str()),
                            None => self.add(a.name.id.split('.').next().unwrap_or_default()),
                        }
                    }
                }
                Stmt::ImportFrom(f) => {
                    for a in &f.names {
                        self.add(a.asname.as_ref().unwrap_or(&a.name).id.as_str());
                    }
                }
                _ => {}
            }
            visitor::walk_stmt(self, s);
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Name(n) = e {
                if matches!(n.ctx, ExprContext::Store | ExprContext::Del) {
                    self.add(n.id.as_str());
                }
            }
            visitor::walk_expr(self, e);
        }
        fn visit_parameter(&mut self, p: &'a ruff_python_ast::Parameter) {
            self.add(p.name.id.as_str());
            visitor::walk_parameter(self, p);
        }
        fn visit_except_handler(&mut self, h: &'a ruff_python_ast::ExceptHandler) {
            let ruff_python_ast::ExceptHandler::ExceptHandler(h2) = h;
            if let Some(n) = &h2.name {
                self.add(n.id.as_str());
            }
            visitor::walk_except_handler(self, h);
        }
    }
    let mut b = Bound(HashMap::new());
    for s in &module.body {
        b.visit_stmt(s);
    }
    b.0
}

/// Names bound once, by an import of what the rules read, each with its usual spelling when
/// that differs from the name (`th` -> `torch`, `no_grad` -> `torch.no_grad`, `Linear` ->
/// `nn.Linear`).
pub fn respellings(module: &ModModule) -> HashMap<String, String> {
    struct Imports(Vec<(String, String)>);
    impl<'a> Visitor<'a> for Imports {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            match s {
                Stmt::Import(i) => {
                    for a in &i.names {
                        let full = a.name.id.as_str();
                        match &a.asname {
                            Some(n) if read_by_rules(full) => {
                                self.0.push((n.id.to_string(), usual(full)));
                            }
                            None if full == "numpy" => self.0.push((full.to_owned(), usual(full))),
                            _ => {}
                        }
                    }
                }
                Stmt::ImportFrom(f) if f.level == 0 => {
                    let from = f.module.as_ref().map(|m| m.id.as_str()).unwrap_or("");
                    if read_by_rules(from) {
                        for a in &f.names {
                            if a.name.id.as_str() == "*" {
                                continue;
                            }
                            let bound = a.asname.as_ref().unwrap_or(&a.name).id.to_string();
                            self.0
                                .push((bound, usual(&format!("{from}.{}", a.name.id))));
                        }
                    }
                }
                _ => {}
            }
            visitor::walk_stmt(self, s);
        }
    }
    let mut imports = Imports(Vec::new());
    for s in &module.body {
        imports.visit_stmt(s);
    }
    let bound = bindings(module);
    imports
        .0
        .into_iter()
        .filter(|(name, spelled)| name != spelled && bound.get(name) == Some(&1))
        .collect()
}

/// `a.b.c` as nested attribute nodes, every one with `range`.
fn dotted_expr(path: &str, range: TextRange) -> Expr {
    let mut parts = path.split('.');
    let first = parts.next().unwrap_or_default();
    let mut e = Expr::Name(ExprName {
        node_index: AtomicNodeIndex::default(),
        range,
        id: first.into(),
        ctx: ExprContext::Load,
    });
    for p in parts {
        e = Expr::Attribute(ExprAttribute {
            node_index: AtomicNodeIndex::default(),
            range,
            value: Box::new(e),
            attr: Identifier::new(p, range),
            ctx: ExprContext::Load,
        });
    }
    e
}

struct Respell<'m>(&'m HashMap<String, String>);

/// Torch functions that are a tensor method under another spelling: `torch.detach(h)` is
/// `h.detach()`.
const METHOD_FUNCTIONS: &[&str] = &["detach", "detach_"];

/// The method a call names through the tensor class (`torch.Tensor.detach(h)`) or as one of
/// torch's functions that are the method (`torch.detach(h)`): `h.detach()`.
fn as_method(e: &mut Expr) {
    let Expr::Call(c) = e else { return };
    let Some(name) = crate::checker::dotted(&c.func) else {
        return;
    };
    let method = match name.strip_prefix("torch.Tensor.") {
        Some(m) if !m.contains('.') => m,
        _ => match name.strip_prefix("torch.") {
            Some(m) if METHOD_FUNCTIONS.contains(&m) => m,
            _ => return,
        },
    };
    if c.arguments.args.is_empty() || matches!(c.arguments.args[0], Expr::Starred(_)) {
        return;
    }
    let method = Identifier::new(method, c.func.range());
    let range = c.func.range();
    let mut args = std::mem::take(&mut c.arguments.args).into_vec();
    let receiver = args.remove(0);
    c.arguments.args = args.into_boxed_slice();
    *c.func = Expr::Attribute(ExprAttribute {
        node_index: AtomicNodeIndex::default(),
        range,
        value: Box::new(receiver),
        attr: method,
        ctx: ExprContext::Load,
    });
}

impl Transformer for Respell<'_> {
    fn visit_expr(&self, e: &mut Expr) {
        if let Expr::Name(n) = e {
            if n.ctx == ExprContext::Load {
                if let Some(spelled) = self.0.get(n.id.as_str()) {
                    *e = dotted_expr(spelled, n.range);
                    return;
                }
            }
        }
        transformer::walk_expr(self, e);
        as_method(e);
    }
}

/// Rewrites the uses of the names [`respellings`] finds, in place, and the calls of a tensor
/// method through the class or a torch function of the same meaning (`torch.Tensor.detach(h)`,
/// `torch.detach(h)`) to the method called on its first argument (`h.detach()`).
pub fn respell(module: &mut ModModule) {
    let names = respellings(module);
    let t = Respell(&names);
    for s in &mut module.body {
        t.visit_stmt(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spelled(src: &str) -> HashMap<String, String> {
        respellings(ruff_python_parser::parse_module(src).unwrap().syntax())
    }

    #[test]
    fn imported_names_get_the_usual_spelling() {
        let got = spelled(
            "import torch as th\nimport numpy\nimport torch.nn.functional as fn\nfrom torch import no_grad, tensor as T, nn\nfrom torch.nn import Linear, functional as F\nfrom torch.nn.parameter import Parameter\nfrom torch.optim import AdamW\n",
        );
        let want: HashMap<String, String> = [
            ("th", "torch"),
            ("numpy", "np"),
            ("fn", "F"),
            ("no_grad", "torch.no_grad"),
            ("T", "torch.tensor"),
            ("Linear", "nn.Linear"),
            ("Parameter", "nn.Parameter"),
            ("AdamW", "torch.optim.AdamW"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
        // `nn` and `F` are already spelled the usual way.
        assert_eq!(got, want);
    }

    #[test]
    fn a_name_bound_again_is_left_alone() {
        let src = "from torch import optim, tensor\nfrom torch.nn import Linear\n\ndef f(optim):\n    optim.step()\n\nfor tensor in xs:\n    pass\nmodel = Linear(2, 2)\n";
        assert_eq!(spelled(src).keys().collect::<Vec<_>>(), vec!["Linear"]);
    }

    #[test]
    fn other_packages_are_not_touched() {
        assert!(spelled("import pandas as pd\nfrom torch_geometric.nn import GCNConv\nfrom torch.utils.checkpoint import checkpoint\n").is_empty());
    }

    #[test]
    fn a_method_called_through_the_class_or_torch_reads_as_the_method() {
        let src = "import torch\nfrom torch import Tensor\nimport torch.nn as nn\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.body = nn.Linear(4, 4)\n        self.head = nn.Linear(4, 1)\n\n    def forward(self, x):\n        h = self.body(x)\n        h = h.detach()\n        return self.head(h)\n";
        let bound = crate::rules::codes(src);
        assert_eq!(bound, vec![("GS316".into(), 13)]);
        for form in [
            "torch.detach(h)",
            "torch.Tensor.detach(h)",
            "Tensor.detach(h)",
            "torch.Tensor.detach_(h)",
        ] {
            assert_eq!(
                crate::rules::codes(&src.replace("h.detach()", form)),
                bound,
                "{form}"
            );
        }
        let item = src.replace("h = h.detach()", "h = torch.Tensor.tolist(h)");
        assert_eq!(crate::rules::codes(&item), vec![("GS317".into(), 13)]);
        // Another function of torch is not a method: `torch.relu(h)` keeps the path.
        assert!(crate::rules::codes(&src.replace("h.detach()", "torch.relu(h)")).is_empty());
    }
}
