//! GS311: the loss computed (or backward called) inside `with torch.no_grad()`.

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt, StmtWith};

use super::Rule;
use crate::checker::{disables_grad, Checker};

pub const RULE: Rule = Rule { code: "GS311" };

struct FindsBackward<'a>(Option<&'a Expr>);

impl<'a> Visitor<'a> for FindsBackward<'a> {
    fn visit_expr(&mut self, e: &'a Expr) {
        if self.0.is_none() {
            if let Expr::Call(c) = e {
                if matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.id.as_str() == "backward")
                {
                    self.0 = Some(e);
                }
            }
        }
        visitor::walk_expr(self, e);
    }
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if !matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
            visitor::walk_stmt(self, s);
        }
    }
}

pub fn check(ck: &mut Checker, w: &StmtWith) {
    let disables = w.items.iter().any(|i| disables_grad(&i.context_expr));
    if !disables {
        return;
    }
    let mut finder = FindsBackward(None);
    visitor::walk_body(&mut finder, &w.body);
    let Some(call) = finder.0 else { return };
    let loc = ck.location(call);
    ck.report(
        RULE.finding("`backward()` is called inside a `no_grad`/`inference_mode` block: the loss has no history, so nothing learns.")
            .at(Some(loc))
            .fix("Move the loss computation and `backward()` out of the block; keep `no_grad` for evaluation only."),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_backward_under_no_grad() {
        let src = "with torch.no_grad():\n    loss = model(x).sum()\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS311".into(), 3)]);
    }

    #[test]
    fn evaluation_blocks_are_fine() {
        let src = "with torch.no_grad():\n    acc = (model(x).argmax(1) == y).float().mean()\nloss.backward()\n";
        assert!(codes(src).is_empty());
    }
}
