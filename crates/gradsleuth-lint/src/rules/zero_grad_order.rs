//! GS309: `zero_grad()` between `backward()` and `step()` in the same block.

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt};

use super::Rule;
use crate::checker::Checker;

pub const RULE: Rule = Rule { code: "GS309" };

/// Method calls (`.backward()`, `.zero_grad()`, `.step()`) anywhere in a statement.
struct Calls(Vec<String>);

impl<'a> Visitor<'a> for Calls {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            if let Expr::Attribute(a) = c.func.as_ref() {
                self.0.push(a.attr.id.to_string());
            }
        }
        visitor::walk_expr(self, e);
    }
    fn visit_stmt(&mut self, s: &'a Stmt) {
        // Nested functions and classes are other scopes.
        if !matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
            visitor::walk_stmt(self, s);
        }
    }
}

pub(crate) fn calls(s: &Stmt) -> Vec<String> {
    let mut c = Calls(Vec::new());
    c.visit_stmt(s);
    c.0
}

/// A block's statements in the order they run, a `with` block's read in line (a context
/// manager does not reorder its body: Accelerate's `with accelerator.accumulate(model):`
/// holds the whole step).
fn in_line<'a>(body: &'a [Stmt], out: &mut Vec<&'a Stmt>) {
    for s in body {
        match s {
            Stmt::With(w) => in_line(&w.body, out),
            _ => out.push(s),
        }
    }
}

/// In a block, the statement `pick` selects (returning the statement to report) among those
/// after one calling `.backward()` and before one calling `.step()`, neither calling either:
/// the last such pick before the first `.step()` that follows it.
pub(crate) fn before_step<'a>(
    body: &'a [Stmt],
    mut pick: impl FnMut(&'a Stmt) -> Option<&'a Stmt>,
) -> Option<&'a Stmt> {
    let mut after_backward = false;
    let mut pending: Option<&Stmt> = None;
    let mut flat = Vec::new();
    in_line(body, &mut flat);
    for s in flat {
        let names = calls(s);
        let has = |n: &str| names.iter().any(|x| x == n);
        if pending.is_some() && has("step") {
            return pending;
        }
        if has("backward") {
            after_backward = true;
            pending = None;
            continue;
        }
        if after_backward && !has("step") {
            if let Some(w) = pick(s) {
                pending = Some(w);
            }
        }
    }
    None
}

pub fn check(ck: &mut Checker, body: &[Stmt]) {
    let zero_grad = |s| calls(s).iter().any(|c| c == "zero_grad").then_some(s);
    if let Some(z) = before_step(body, zero_grad) {
        let loc = ck.location(z);
        ck.report(
            RULE.finding("`zero_grad()` runs after `backward()` and before `step()`: the step sees no gradient.")
                .at(Some(loc))
                .fix("Move `zero_grad()` to the start of the iteration, or right after `step()`."),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_zero_grad_between_backward_and_step() {
        let src = "for x in data:\n    loss = model(x).sum()\n    loss.backward()\n    opt.zero_grad()\n    if ready:\n        opt.step()\n";
        assert_eq!(codes(src), vec![("GS309".into(), 4)]);
    }

    #[test]
    fn reads_the_step_inside_a_with_block() {
        // Accelerate's loop: the whole step inside `with accelerator.accumulate(model):`.
        let src = "for x in data:\n    with accelerator.accumulate(model):\n        loss = model(x).sum()\n        accelerator.backward(loss)\n        opt.zero_grad()\n        if accelerator.sync_gradients:\n            accelerator.clip_grad_norm_(model.parameters(), 1.0)\n        opt.step()\n";
        assert_eq!(codes(src), vec![("GS309".into(), 5)]);
        let fine = "for x in data:\n    with accelerator.accumulate(model):\n        loss = model(x).sum()\n        accelerator.backward(loss)\n        opt.step()\n        opt.zero_grad()\n";
        assert!(codes(fine).is_empty());
    }

    #[test]
    fn the_usual_order_is_fine() {
        let src = "for x in data:\n    opt.zero_grad()\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n    opt.zero_grad()\n";
        assert!(codes(src).is_empty());
    }
}
