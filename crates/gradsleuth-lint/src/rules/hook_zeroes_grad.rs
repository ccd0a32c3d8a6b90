//! GS310: a gradient hook that returns zeros.

use ruff_python_ast::{Expr, Number, Stmt};

use super::Rule;
use crate::checker::{call_name, Checker};

pub const RULE: Rule = Rule { code: "GS310" };

fn zero_number(e: &Expr) -> bool {
    matches!(e, Expr::NumberLiteral(n) if match &n.value { Number::Int(i) => i.as_u64() == Some(0), Number::Float(f) => *f == 0.0, _ => false })
}

/// Does the hook body produce zeros: `g * 0`, `0 * g`, `torch.zeros_like(g)`, `g.zero_()`?
fn zeroes(body: &Expr) -> bool {
    match body {
        Expr::BinOp(b) => {
            matches!(b.op, ruff_python_ast::Operator::Mult)
                && (zero_number(&b.left) || zero_number(&b.right))
        }
        Expr::Call(_) => {
            call_name(body).is_some_and(|n| n.ends_with("zeros_like") || n.ends_with(".zero_"))
        }
        _ => false,
    }
}

/// A test that holds only in a rare step: a NaN/inf check or a magnitude above a large bound
/// (`g.abs().max() > 1e6`). `Some(true)`: rare; `Some(false)`: its negation (rarely false).
fn rare(test: &Expr) -> Option<bool> {
    match test {
        Expr::UnaryOp(u) if matches!(u.op, ruff_python_ast::UnaryOp::Not) => {
            rare(&u.operand).map(|r| !r)
        }
        Expr::Call(_) => {
            let text = crate::checker::dotted_calls(test);
            if text
                .iter()
                .any(|n| n.ends_with("isnan") || n.ends_with("isinf"))
            {
                Some(true)
            } else if text.iter().any(|n| n.ends_with("isfinite")) {
                Some(false)
            } else {
                None
            }
        }
        Expr::Compare(c) if c.ops.len() == 1 => {
            let big = |e: &Expr| match e {
                Expr::NumberLiteral(n) => match &n.value {
                    Number::Int(i) => i.as_u64().is_some_and(|v| v >= 100),
                    Number::Float(f) => *f >= 100.0,
                    _ => false,
                },
                _ => false,
            };
            use ruff_python_ast::CmpOp::*;
            match (&c.ops[0], big(&c.left), big(&c.comparators[0])) {
                (Gt | GtE, false, true) | (Lt | LtE, true, false) => Some(true),
                (Lt | LtE, false, true) | (Gt | GtE, true, false) => Some(false),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Does a hook's result zero the gradient in an ordinary step? Unconditional zeros, or zeros
/// on the side of a test that a rare event decides (`g if g.abs().max() > 1e6 else 0 * g`).
/// Zeros only when the rare thing happens (a NaN guard) are fine; an unknown test is not judged.
fn zero_in_ordinary_step(value: &Expr) -> bool {
    if zeroes(value) {
        return true;
    }
    let Expr::If(i) = value else { return false };
    match rare(&i.test) {
        Some(true) => zero_in_ordinary_step(&i.orelse),
        Some(false) => zero_in_ordinary_step(&i.body),
        None => false,
    }
}

/// The same judgement over a `def` hook's statements: `if test: return A` then `return B`.
fn body_zeroes(body: &[Stmt]) -> bool {
    for (i, s) in body.iter().enumerate() {
        match s {
            Stmt::Return(r) => return r.value.as_deref().is_some_and(zero_in_ordinary_step),
            Stmt::If(f) if f.elif_else_clauses.is_empty() => {
                let then_zero = body_zeroes(&f.body);
                let rest_zero = body_zeroes(&body[i + 1..]);
                return match rare(&f.test) {
                    Some(true) => rest_zero,
                    Some(false) => then_zero,
                    None => false,
                };
            }
            Stmt::If(f) => {
                let else_body = f
                    .elif_else_clauses
                    .last()
                    .filter(|c| c.test.is_none() && f.elif_else_clauses.len() == 1);
                let Some(e) = else_body else { return false };
                return match rare(&f.test) {
                    Some(true) => body_zeroes(&e.body),
                    Some(false) => body_zeroes(&f.body),
                    None => false,
                };
            }
            _ => {}
        }
    }
    false
}

pub fn check(ck: &mut Checker, e: &Expr) {
    let Expr::Call(c) = e else { return };
    if !call_name(e).is_some_and(|n| n.ends_with("register_hook")) {
        return;
    }
    let Some(hook) = c.arguments.args.first() else {
        return;
    };
    // A lambda, a function of the file by name, or one a factory of the file returns
    // (`p.register_hook(make_hook(scale))` with `def make_hook(s): def hook(g): ...; return hook`).
    let zero = match hook {
        Expr::Lambda(l) => zero_in_ordinary_step(&l.body),
        Expr::Name(n) => ck.defs.get(n.id.as_str()).is_some_and(|f| body_zeroes(&f.body)),
        Expr::Call(_) => call_name(hook)
            .and_then(|n| ck.defs.get(n.as_str()).copied())
            .is_some_and(|factory| {
                factory.body.iter().any(|s| match s {
                    Stmt::FunctionDef(inner) => body_zeroes(&inner.body),
                    Stmt::Return(r) => matches!(r.value.as_deref(), Some(Expr::Lambda(l)) if zero_in_ordinary_step(&l.body)),
                    _ => false,
                })
            }),
        _ => false,
    };
    if !zero {
        return;
    }
    let loc = ck.location(e);
    ck.report(
        RULE.finding("This gradient hook returns zeros in an ordinary step: everything upstream of the tensor gets a zero gradient.")
            .at(Some(loc))
            .fix("Freeze with `requires_grad_(False)` instead, or return a non-zero rescaled gradient (zeros only under a test of a rare event, such as a NaN guard)."),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_zeroing_hooks() {
        let src =
            "w.register_hook(lambda g: torch.zeros_like(g))\nh.register_hook(lambda g: g * 0)\n";
        assert_eq!(codes(src), vec![("GS310".into(), 1), ("GS310".into(), 2)]);
    }

    #[test]
    fn flags_hooks_that_zero_unless_something_rare_happens() {
        let src = "p.register_hook(lambda g: g if g.abs().max() > 1e6 else torch.zeros_like(g))\n\ndef keep_finite(g):\n    if torch.isfinite(g).all():\n        return g * 0\n    return g\n\nw.register_hook(keep_finite)\n\ndef make_hook(scale):\n    def hook(g):\n        return torch.zeros_like(g)\n    return hook\n\nb.register_hook(make_hook(2.0))\n";
        assert_eq!(
            codes(src),
            vec![
                ("GS310".into(), 1),
                ("GS310".into(), 8),
                ("GS310".into(), 15)
            ]
        );
    }

    #[test]
    fn guards_and_unknown_tests_are_fine() {
        // Zeros only on a NaN/overflow step, or under a test nobody can judge statically.
        let src = "p.register_hook(lambda g: torch.zeros_like(g) if torch.isnan(g).any() else g)\n\ndef guard(g):\n    if g.norm() > 1e4:\n        return torch.zeros_like(g)\n    return g\n\nw.register_hook(guard)\nq.register_hook(lambda g: g if step % 2 else g * 0)\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn scaling_hooks_are_fine() {
        let src = "w.register_hook(lambda g: g * 0.5)\nh.register_hook(lambda g: g.clamp(-1, 1))\n";
        assert!(codes(src).is_empty());
    }
}
