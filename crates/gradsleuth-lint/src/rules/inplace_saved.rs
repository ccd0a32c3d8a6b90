//! GS321: an in-place op on a tensor whose value backward needs (the output of sigmoid, tanh,
//! exp, softmax, relu, sqrt ...), in `forward`.

use std::collections::HashMap;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt, StmtFunctionDef};
use ruff_text_size::{Ranged, TextRange};

use super::Rule;
use crate::checker::{disables_grad, dotted, Checker};

pub const RULE: Rule = Rule { code: "GS321" };

const SAVES_OUTPUT: &[&str] = &[
    "sigmoid",
    "tanh",
    "exp",
    "softmax",
    "log_softmax",
    "relu",
    "sqrt",
    "rsqrt",
    "reciprocal",
];

/// `torch.sigmoid(x)`, `F.softmax(x, -1)`, `x.tanh()`: an op whose backward saves its output.
fn saves_output(e: &Expr) -> bool {
    let Expr::Call(c) = e else { return false };
    let Expr::Attribute(a) = c.func.as_ref() else {
        return false;
    };
    if !SAVES_OUTPUT.contains(&a.attr.id.as_str()) {
        return false;
    }
    let inplace_kw = c.arguments.keywords.iter().any(|k| {
        k.arg.as_ref().is_some_and(|n| n.id.as_str() == "inplace")
            && matches!(&k.value, Expr::BooleanLiteral(b) if b.value)
    });
    !inplace_kw && !dotted(&a.value).is_some_and(|r| r == "math" || r == "np" || r == "numpy")
}

#[derive(Default)]
struct Scan {
    /// name -> where the output-saving op bound it
    saved: HashMap<String, TextRange>,
    no_grad: u32,
    hits: Vec<(TextRange, TextRange)>,
}

impl Scan {
    fn inplace(&mut self, base: &Expr, at: TextRange) {
        if let Expr::Name(n) = base {
            if self.no_grad == 0 {
                if let Some(op) = self.saved.remove(n.id.as_str()) {
                    self.hits.push((at, op));
                }
            }
        }
    }
}

impl Scan {
    /// Names a binding target (a tuple, a starred name, a walrus) gives new values: what they
    /// held before is gone, whatever op made it.
    fn rebind(&mut self, target: &Expr) {
        let mut names = Vec::new();
        crate::checker::bound_names(target, &mut names);
        for n in names {
            self.saved.remove(n);
        }
    }
}

impl<'a> Visitor<'a> for Scan {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::FunctionDef(_) | Stmt::ClassDef(_) => return,
            Stmt::With(w) if w.items.iter().any(|i| disables_grad(&i.context_expr)) => {
                self.no_grad += 1;
                visitor::walk_stmt(self, s);
                self.no_grad -= 1;
                return;
            }
            Stmt::Assign(a) => {
                visitor::walk_expr(self, &a.value);
                for t in &a.targets {
                    match t {
                        Expr::Name(n) => {
                            if saves_output(&a.value) {
                                self.saved.insert(n.id.to_string(), a.value.range());
                            } else {
                                self.saved.remove(n.id.as_str());
                            }
                        }
                        Expr::Subscript(sub) => self.inplace(&sub.value, s.range()),
                        // `w, idx = torch.topk(w, k)`: every name the pattern binds is new.
                        other => self.rebind(other),
                    }
                }
                return;
            }
            Stmt::AugAssign(a) => self.inplace(&a.target, s.range()),
            Stmt::AnnAssign(a) if a.value.is_some() => self.rebind(&a.target),
            Stmt::For(f) => self.rebind(&f.target),
            Stmt::With(w) => {
                for item in &w.items {
                    if let Some(v) = &item.optional_vars {
                        self.rebind(v);
                    }
                }
            }
            _ => {}
        }
        visitor::walk_stmt(self, s);
    }

    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Named(n) = e {
            visitor::walk_expr(self, &n.value);
            self.rebind(&n.target);
            return;
        }
        if let Expr::Call(c) = e {
            if let Expr::Attribute(a) = c.func.as_ref() {
                let m = a.attr.id.as_str();
                if m.ends_with('_') && !m.starts_with('_') && m != "requires_grad_" {
                    self.inplace(&a.value, e.range());
                }
            }
        }
        visitor::walk_expr(self, e);
    }
}

pub fn check(ck: &mut Checker, f: &StmtFunctionDef) {
    if !ck.in_forward() {
        return;
    }
    let mut scan = Scan::default();
    for s in &f.body {
        scan.visit_stmt(s);
    }
    for (at, op) in scan.hits {
        let loc = ck.location(&at);
        let op_loc = ck.location(&op);
        let mut finding = RULE
            .finding("An in-place op on a tensor whose value backward needs: backward fails with \"one of the variables needed for gradient computation has been modified by an inplace operation\".")
            .at(Some(loc))
            .fix("Use the out-of-place form (`x = x + 1`, `x.masked_fill(...)`), or clone before modifying.");
        finding.related.push(gradsleuth_model::Related {
            location: op_loc,
            message: "the op whose output backward saves".into(),
        });
        ck.report(finding);
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    const HEAD: &str = "import torch\nimport torch.nn as nn\n\nclass Block(nn.Module):\n    def forward(self, x, pad):\n";

    #[test]
    fn flags_augassign_on_sigmoid_output() {
        let src = format!("{HEAD}        g = torch.sigmoid(self.gate(x))\n        h = self.fc(x) * g\n        g += 1.0\n        return h\n");
        assert_eq!(codes(&src), vec![("GS321".into(), 8)]);
    }

    #[test]
    fn flags_masked_fill_on_softmax() {
        let src = format!("{HEAD}        probs = (x @ x.transpose(1, 2)).softmax(-1)\n        probs.masked_fill_(pad, 0.0)\n        return probs @ x\n");
        assert_eq!(codes(&src), vec![("GS321".into(), 7)]);
    }

    #[test]
    fn out_of_place_and_rebinding_are_fine() {
        let src = format!("{HEAD}        g = torch.sigmoid(x)\n        g = g * 2\n        g += 1.0\n        p = x.softmax(-1)\n        p = p.masked_fill(pad, 0.0)\n        out = self.fc(x)\n        out += x\n        return torch.relu(out) + g + p\n");
        assert!(codes(&src).is_empty());
    }

    #[test]
    fn a_name_rebound_by_a_tuple_loop_or_walrus_is_new() {
        // transformers' Hunyuan MoE router: the softmax output is rebound to topk's values
        // (which topk's backward does not save) before the in-place division.
        for rebind in [
            "w, idx = torch.topk(w, 2, dim=-1)",
            "(w, _), idx = (x.sort(), 0)",
            "*w, = [x * 2]",
            "for w in [x]:\n            pass",
            "with self.ctx() as w:\n            pass",
            "if (w := x * 2) is None:\n            pass",
            "w: torch.Tensor = x * 3",
        ] {
            let src = format!("{HEAD}        w = torch.softmax(x, dim=1)\n        {rebind}\n        w /= w.sum(dim=-1, keepdim=True)\n        return w\n");
            assert!(codes(&src).is_empty(), "{rebind}");
        }
        // Doge's router: the in-place division is on the softmax output itself.
        let src = format!("{HEAD}        s, idx = x.topk(2, dim=-1)\n        w = F.softmax(s, dim=-1)\n        w /= w.sum(dim=-1, keepdim=True)\n        return w\n");
        assert_eq!(codes(&src), vec![("GS321".into(), 8)]);
    }
}
