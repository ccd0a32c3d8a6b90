//! GS320: an in-place op on a parameter with gradient recording on.

use std::collections::HashSet;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, ModModule, Stmt};
use ruff_text_size::{Ranged, TextRange};

use super::Rule;
use crate::checker::{disables_grad, dotted, Checker};

pub const RULE: Rule = Rule { code: "GS320" };

/// In-place methods that do not change values (`detach_` on a leaf only turns its
/// `requires_grad` off: timm's re-parameterisation detaches the branches it drops).
const SAFE: &[&str] = &["requires_grad_", "share_memory_", "retain_grad_", "detach_"];

fn is_inplace_method(name: &str) -> bool {
    name.ends_with('_') && !name.starts_with('_') && !SAFE.contains(&name)
}

/// `X.weight` / `X.bias`, or a loop variable over `.parameters()`.
fn is_parameter(e: &Expr, loop_params: &[String]) -> bool {
    match e {
        Expr::Attribute(a) => matches!(a.attr.id.as_str(), "weight" | "bias"),
        Expr::Name(n) => loop_params.iter().any(|p| p == n.id.as_str()),
        _ => false,
    }
}

/// Names of functions called (or passed, as to `model.apply`) where grad recording is off,
/// and where it is on.
struct CalledUnderNoGrad {
    depth: u32,
    names: HashSet<String>,
    with_grad: HashSet<String>,
    /// Enclosing functions: a function calling itself runs where its first caller decides.
    within: Vec<String>,
}

impl<'a> Visitor<'a> for CalledUnderNoGrad {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::With(w) if w.items.iter().any(|i| disables_grad(&i.context_expr)) => {
                self.depth += 1;
                visitor::walk_stmt(self, s);
                self.depth -= 1;
            }
            Stmt::FunctionDef(f) => {
                let saved = self.depth;
                // A function nested in one that runs under `no_grad` runs there too: it is
                // local, called by its encloser or by its siblings (open_clip's
                // `load_big_vision_weights` and its `_copy_*` helpers).
                self.depth = u32::from(
                    f.decorator_list
                        .iter()
                        .any(|d| disables_grad(&d.expression))
                        || (!self.within.is_empty() && saved > 0),
                );
                self.within.push(f.name.id.to_string());
                visitor::walk_stmt(self, s);
                self.within.pop();
                self.depth = saved;
            }
            _ => visitor::walk_stmt(self, s),
        }
    }
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            for (i, callee) in std::iter::once(c.func.as_ref())
                .chain(c.arguments.args.iter())
                .enumerate()
            {
                // A method called on whatever it is called on (`Trainer(...).fit()`).
                let method = match callee {
                    Expr::Attribute(a) if i == 0 => Some(a.attr.id.to_string()),
                    _ => None,
                };
                if let Some(n) = method.or_else(|| dotted(callee)) {
                    let name = n.rsplit('.').next().unwrap_or(&n).to_owned();
                    if self.depth > 0 {
                        self.names.insert(name);
                    } else if !self.within.contains(&name) {
                        self.with_grad.insert(name);
                    }
                }
            }
        }
        visitor::walk_expr(self, e);
    }
}

struct Finder<'n> {
    exempt: &'n HashSet<String>,
    /// Functions this file calls (or passes) with gradient recording on. A function it never
    /// calls runs where its callers decide (a library's `convert_model`, called under
    /// `torch.no_grad()` by another file): whether PyTorch raises is unknown here.
    called: &'n HashSet<String>,
    /// Classes whose methods a framework calls with gradient recording on: modules (their
    /// `forward`, through `model(x)`; a LightningModule's `training_step`) and Hugging Face
    /// `Trainer` subclasses (`compute_loss`, `training_step`).
    entry_classes: &'n HashSet<String>,
    class: Vec<String>,
    no_grad: u32,
    /// Enclosing functions, counted.
    nested: u32,
    loop_params: Vec<String>,
    hits: Vec<TextRange>,
}

impl Finder<'_> {
    fn target(&mut self, t: &Expr, range: TextRange) {
        let base = match t {
            Expr::Subscript(s) => s.value.as_ref(),
            other => other,
        };
        if self.no_grad == 0 && is_parameter(base, &self.loop_params) {
            self.hits.push(range);
        }
    }
}

impl<'a> Visitor<'a> for Finder<'_> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::With(w) if w.items.iter().any(|i| disables_grad(&i.context_expr)) => {
                self.no_grad += 1;
                visitor::walk_stmt(self, s);
                self.no_grad -= 1;
                return;
            }
            Stmt::ClassDef(c) => {
                self.class.push(c.name.id.to_string());
                visitor::walk_stmt(self, s);
                self.class.pop();
                return;
            }
            Stmt::FunctionDef(f) => {
                let name = f.name.id.as_str();
                let entry = matches!(name, "forward" | "training_step" | "compute_loss")
                    && self
                        .class
                        .last()
                        .is_some_and(|c| self.entry_classes.contains(c));
                let off = f
                    .decorator_list
                    .iter()
                    .any(|d| disables_grad(&d.expression))
                    || self.exempt.contains(name)
                    || !(entry || self.called.contains(name))
                    || (self.nested > 0 && self.no_grad > 0);
                let saved = (self.no_grad, std::mem::take(&mut self.loop_params));
                self.no_grad = u32::from(off);
                self.nested += 1;
                visitor::walk_stmt(self, s);
                self.nested -= 1;
                (self.no_grad, self.loop_params) = saved;
                return;
            }
            Stmt::For(f) => {
                let over_params = matches!(f.iter.as_ref(), Expr::Call(c)
                    if matches!(c.func.as_ref(), Expr::Attribute(a)
                        if matches!(a.attr.id.as_str(), "parameters" | "named_parameters")));
                let var = match f.target.as_ref() {
                    Expr::Name(n) => Some(n.id.to_string()),
                    Expr::Tuple(t) => t.elts.last().and_then(|e| match e {
                        Expr::Name(n) => Some(n.id.to_string()),
                        _ => None,
                    }),
                    _ => None,
                };
                if let (true, Some(v)) = (over_params, var) {
                    self.loop_params.push(v);
                    visitor::walk_stmt(self, s);
                    self.loop_params.pop();
                    return;
                }
            }
            Stmt::AugAssign(a) => self.target(&a.target, s.range()),
            Stmt::Assign(a) => {
                for t in &a.targets {
                    if matches!(t, Expr::Subscript(_)) {
                        self.target(t, s.range());
                    }
                }
            }
            _ => {}
        }
        visitor::walk_stmt(self, s);
    }

    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            if let Expr::Attribute(a) = c.func.as_ref() {
                if is_inplace_method(a.attr.id.as_str()) {
                    self.target(&a.value, e.range());
                }
            }
        }
        visitor::walk_expr(self, e);
    }
}

pub fn check(ck: &mut Checker, module: &ModModule) {
    if !ck.source.contains("_(") && !ck.source.contains("=") {
        return;
    }
    let mut called = CalledUnderNoGrad {
        depth: 0,
        names: HashSet::new(),
        with_grad: HashSet::new(),
        within: Vec::new(),
    };
    for s in &module.body {
        called.visit_stmt(s);
    }
    let entry_classes: HashSet<String> = module
        .body
        .iter()
        .filter_map(|s| match s {
            Stmt::ClassDef(c) => Some(c),
            _ => None,
        })
        .filter(|c| ck.is_module_class(c.name.id.as_str()) || crate::checker::is_trainer_class(c))
        .map(|c| c.name.id.to_string())
        .collect();
    let mut finder = Finder {
        exempt: &called.names,
        called: &called.with_grad,
        entry_classes: &entry_classes,
        class: Vec::new(),
        no_grad: 0,
        nested: 0,
        loop_params: Vec::new(),
        hits: Vec::new(),
    };
    for s in &module.body {
        finder.visit_stmt(s);
    }
    for r in finder.hits {
        let loc = ck.location(&r);
        ck.report(
            RULE.finding("An in-place op on a parameter with gradient recording on: PyTorch raises \"a leaf Variable that requires grad is being used in an in-place operation\".")
                .at(Some(loc))
                .fix("Wrap it in `with torch.no_grad():` (or use `nn.init.*`, which does)."),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_init_outside_no_grad() {
        let src = "import torch.nn as nn\n\ndef init_weights(model):\n    for m in model.modules():\n        if isinstance(m, nn.Linear):\n            m.weight.mul_(0.5)\n\ninit_weights(net)\n";
        assert_eq!(codes(src), vec![("GS320".into(), 6)]);
    }

    #[test]
    fn flags_manual_sgd_without_no_grad() {
        let src = "for x, y in data:\n    loss = (model(x) - y).pow(2).mean()\n    loss.backward()\n    for p in model.parameters():\n        p -= 0.1 * p.grad\n";
        assert_eq!(codes(src), vec![("GS320".into(), 5)]);
    }

    #[test]
    fn a_function_the_file_never_calls_is_judged_by_its_callers() {
        // accelerate's `convert_model`, called under `torch.no_grad()` from another file;
        // timm's re-parameterisation detaching the branches it drops.
        let src = "def convert_model(model):\n    te = Linear(4, 4)\n    te.weight.copy_(model.weight)\n    for child in model.children():\n        convert_model(child)\n\nclass B(nn.Module):\n    def reparameterize(self):\n        for p in self.parameters():\n            p.detach_()\n";
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        // Called in the file with gradient recording on: PyTorch raises.
        let called = format!("{src}\nconvert_model(net)\n");
        assert_eq!(codes(&called), vec![("GS320".into(), 3)]);
    }

    #[test]
    fn helpers_nested_in_a_no_grad_function_run_under_it() {
        // open_clip's checkpoint converter: helpers defined inside a `@torch.no_grad()`
        // function, calling one another.
        let src = "@torch.no_grad()\ndef load(model, w):\n    def _head(m):\n        m.head.weight.copy_(w['h'])\n    def _img(m):\n        m.proj.weight.copy_(w['p'])\n        _head(m)\n    _img(model)\n\nload(net, ckpt)\n";
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        // Nested in a function that records gradients: PyTorch raises.
        let src = "def load(model, w):\n    def _head(m):\n        m.head.weight.copy_(w['h'])\n    _head(model)\n\nload(net, ckpt)\n";
        assert_eq!(codes(src), vec![("GS320".into(), 3)]);
    }

    #[test]
    fn no_grad_init_and_data_are_fine() {
        let src = "import torch\n\n@torch.no_grad()\ndef init_a(m):\n    m.weight.normal_()\n\ndef init_b(m):\n    m.weight.data.zero_()\n    m.bias.grad.zero_()\n\ndef init_c(m):\n    m.weight.fill_(1.0)\n\nwith torch.no_grad():\n    net.apply(init_c)\n    for p in net.parameters():\n        p -= 0.1 * p.grad\nnet.weight.requires_grad_(False)\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn methods_a_framework_calls_with_gradients_on_are_checked() {
        // Never called by name in the file: `model(x)` calls `forward`, Lightning calls
        // `training_step`, a Trainer calls `compute_loss`.
        let src = "import lightning as L\n\nclass Lit(L.LightningModule):\n    def training_step(self, batch, i):\n        self.net.weight.clamp_(-1, 1)\n        return self.net(batch).sum()\n";
        assert_eq!(codes(src), vec![("GS320".into(), 5)]);
        let src = "class Net(nn.Module):\n    def forward(self, x):\n        self.fc.weight.mul_(0.5)\n        return self.fc(x)\n";
        assert_eq!(codes(src), vec![("GS320".into(), 3)]);
        let src = "class T(Trainer):\n    def compute_loss(self, model, inputs):\n        model.head.bias.zero_()\n        return model(**inputs).loss\n";
        assert_eq!(codes(src), vec![("GS320".into(), 3)]);
        // Under no_grad inside, or a method of a class no framework calls: quiet.
        let src = "class Net(nn.Module):\n    def forward(self, x):\n        with torch.no_grad():\n            self.fc.weight.clamp_(-1, 1)\n        return self.fc(x)\n\nclass Helper:\n    def forward(self, m):\n        m.weight.clamp_(-1, 1)\n";
        assert!(codes(src).is_empty());
    }
}
