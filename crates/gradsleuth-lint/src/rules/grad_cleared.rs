//! GS330: a loop over a model's parameters that clears or zeroes each gradient by hand
//! (`p.grad = None`, `p.grad.zero_()`, `p.grad.data.zero_()`) between `backward()` and
//! `step()` in the same block: the step sees no gradient, so nothing trains. A loop over a
//! sub-module's parameters (`model.embed.parameters()`) is left alone: clearing part of the
//! model by hand is a way to freeze it, which `run` tells in an info line.

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Number, Stmt};

use super::update_discarded::parameter_name;
use super::Rule;
use crate::checker::Checker;

pub const RULE: Rule = Rule { code: "GS330" };

/// The loop's parameters are a whole model's or an optimizer group's: every
/// `.parameters()` / `.named_parameters()` in the iterable is called on a plain name, and
/// every name known to hold parameters holds a whole model's.
pub(crate) fn whole(iter: &Expr, ck: &Checker) -> bool {
    struct Receivers<'c, 'k>(Vec<bool>, &'c Checker<'k>);
    impl<'a> Visitor<'a> for Receivers<'_, '_> {
        fn visit_expr(&mut self, e: &'a Expr) {
            match e {
                Expr::Call(c) => {
                    if let Expr::Attribute(a) = c.func.as_ref() {
                        if matches!(a.attr.id.as_str(), "parameters" | "named_parameters") {
                            self.0.push(matches!(a.value.as_ref(), Expr::Name(_)));
                        }
                    }
                }
                Expr::Name(n) => {
                    if let Some(w) = self.1.param_lists.get(n.id.as_str()) {
                        self.0.push(*w);
                    }
                }
                _ => {}
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut r = Receivers(Vec::new(), ck);
    r.visit_expr(iter);
    r.0.iter().all(|w| *w)
}

/// `<name>.grad`, or a view of it that shares its storage (`<name>.grad.data`).
fn is_grad_of(e: &Expr, name: &str) -> bool {
    let Expr::Attribute(a) = e else { return false };
    match a.attr.id.as_str() {
        "grad" => matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == name),
        "data" => is_grad_of(&a.value, name),
        _ => false,
    }
}

fn is_zero(e: &Expr) -> bool {
    match e {
        Expr::NumberLiteral(n) => match &n.value {
            Number::Int(i) => i.as_u64() == Some(0),
            Number::Float(f) => *f == 0.0,
            _ => false,
        },
        _ => false,
    }
}

/// A value that leaves nothing of a gradient: `None`, `torch.zeros_like(...)`, `0`.
fn clears(e: &Expr) -> bool {
    match e {
        Expr::NoneLiteral(_) => true,
        Expr::Call(c) => match c.func.as_ref() {
            Expr::Attribute(a) => matches!(a.attr.id.as_str(), "zeros_like" | "zeros"),
            Expr::Name(n) => matches!(n.id.as_str(), "zeros_like" | "zeros"),
            _ => false,
        },
        _ => is_zero(e),
    }
}

/// The first statement in the loop body that clears `name`'s gradient: `p.grad = None`,
/// `p.grad = torch.zeros_like(p)`, `p.grad.zero_()`, `p.grad.data.zero_()`,
/// `p.grad.mul_(0)`, `p.grad.fill_(0)`, `p.grad[:] = 0`.
struct Clears<'a, 'b> {
    name: &'b str,
    found: Option<&'a Stmt>,
}

impl<'a> Visitor<'a> for Clears<'a, '_> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if self.found.is_some() || matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
            return;
        }
        let hit = match s {
            Stmt::Assign(a) => {
                clears(&a.value)
                    && a.targets.iter().any(|t| match t {
                        Expr::Attribute(_) => is_grad_of(t, self.name),
                        Expr::Subscript(sub) => is_grad_of(&sub.value, self.name),
                        _ => false,
                    })
            }
            Stmt::Expr(e) => match e.value.as_ref() {
                Expr::Call(c) => match c.func.as_ref() {
                    Expr::Attribute(a) if is_grad_of(&a.value, self.name) => {
                        match a.attr.id.as_str() {
                            "zero_" => true,
                            "mul_" | "fill_" => c.arguments.args.first().is_some_and(is_zero),
                            _ => false,
                        }
                    }
                    _ => false,
                },
                _ => false,
            },
            _ => false,
        };
        if hit {
            self.found = Some(s);
            return;
        }
        visitor::walk_stmt(self, s);
    }
}

pub fn check(ck: &mut Checker, body: &[Stmt]) {
    let found = super::zero_grad_order::before_step(ck, body, |s| cleared_in(s, ck));
    if let Some(w) = found {
        let loc = ck.location(w);
        ck.report(
            RULE.finding("This loop clears every parameter's gradient after `backward()` and before `step()`: the step sees no gradient, so nothing trains.")
                .at(Some(loc))
                .fix("Clear gradients at the start of the iteration (`optimizer.zero_grad()`), or right after `step()`."),
        );
    }
}

/// The write in `s` that clears each gradient of a whole model's parameters, in a loop over
/// them at any depth (`for group in opt.param_groups: for p in group["params"]: ...`).
fn cleared_in<'a>(s: &'a Stmt, ck: &Checker) -> Option<&'a Stmt> {
    struct Loops<'a, 'c, 'k>(Option<&'a Stmt>, &'c Checker<'k>);
    impl<'a> Visitor<'a> for Loops<'a, '_, '_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if self.0.is_some() || matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
                return;
            }
            if let Stmt::For(f) = s {
                if let Some(name) = parameter_name(&f.target, &f.iter, self.1) {
                    if whole(&f.iter, self.1) {
                        let mut c = Clears { name, found: None };
                        visitor::walk_body(&mut c, &f.body);
                        self.0 = c.found;
                    }
                    return;
                }
            }
            visitor::walk_stmt(self, s);
        }
    }
    let mut l = Loops(None, ck);
    l.visit_stmt(s);
    l.0
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    fn gs330(src: &str) -> Vec<u32> {
        codes(src)
            .into_iter()
            .filter(|(c, _)| c == "GS330")
            .map(|(_, l)| l)
            .collect()
    }

    #[test]
    fn every_shape_of_clearing_each_gradient_after_backward_is_flagged_at_the_write() {
        for write in [
            "p.grad = None",
            "p.grad = torch.zeros_like(p)",
            "p.grad.zero_()",
            "p.grad.data.zero_()",
            "p.grad.mul_(0)",
            "p.grad.fill_(0.0)",
            "p.grad[:] = 0",
            "if p.grad is not None:\n            p.grad.zero_()",
        ] {
            let src = format!(
                "for x in data:\n    loss = model(x).sum()\n    loss.backward()\n    for p in model.parameters():\n        {write}\n    opt.step()\n"
            );
            let want = if write.starts_with("if") { 6 } else { 5 };
            assert_eq!(gs330(&src), vec![want], "{write}");
        }
    }

    #[test]
    fn named_parameters_and_optimizer_groups_are_whole_models_too() {
        let src = "def train():\n    loss.backward()\n    for group in opt.param_groups:\n        for p in group['params']:\n            p.grad = None\n    opt.step()\n";
        assert_eq!(gs330(src), vec![5]);
        let src = "for x in data:\n    loss.backward()\n    for n, p in model.named_parameters():\n        p.grad = None\n    opt.step()\n";
        assert_eq!(gs330(src), vec![4]);
    }

    #[test]
    fn a_name_bound_to_parameters_is_followed() {
        let src = "params = list(rnn.parameters()) + list(head.parameters())\nfor x in data:\n    loss.backward()\n    for p in params:\n        p.grad.data.zero_()\n    opt.step()\n";
        assert_eq!(gs330(src), vec![5]);
        // a sub-module's parameters, by name: freezing by hand
        let src = "frozen = list(model.embed.parameters())\nfor x in data:\n    loss.backward()\n    for p in frozen:\n        p.grad = None\n    opt.step()\n";
        assert!(gs330(src).is_empty());
    }

    #[test]
    fn legitimate_shapes_stay_quiet() {
        for src in [
            // the usual order: cleared before the forward, or after the step
            "for x in data:\n    for p in model.parameters():\n        p.grad = None\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n",
            "for x in data:\n    loss.backward()\n    opt.step()\n    for p in model.parameters():\n        p.grad = None\n",
            // a sub-module frozen by hand (`run` tells it as an info line)
            "for x in data:\n    loss.backward()\n    for p in model.embed.parameters():\n        p.grad = None\n    opt.step()\n",
            // scaling or clipping, not clearing
            "for x in data:\n    loss.backward()\n    for p in model.parameters():\n        p.grad.mul_(0.5)\n    opt.step()\n",
            // another tensor's gradient
            "for x in data:\n    loss.backward()\n    for p in model.parameters():\n        q.grad = None\n    opt.step()\n",
        ] {
            assert!(gs330(src).is_empty(), "{src}");
        }
    }
}
