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
                        _ => {}
                    }
                }
                return;
            }
            Stmt::AugAssign(a) => self.inplace(&a.target, s.range()),
            _ => {}
        }
        visitor::walk_stmt(self, s);
    }

    fn visit_expr(&mut self, e: &'a Expr) {
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
}
