//! GS310: a gradient hook that returns zeros.

use ruff_python_ast::{Expr, Number};

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

pub fn check(ck: &mut Checker, e: &Expr) {
    let Expr::Call(c) = e else { return };
    if !call_name(e).is_some_and(|n| n.ends_with("register_hook")) {
        return;
    }
    let Some(Expr::Lambda(l)) = c.arguments.args.first() else {
        return;
    };
    if !zeroes(&l.body) {
        return;
    }
    let loc = ck.location(e);
    ck.report(
        RULE.finding("This gradient hook returns zeros: everything upstream of the tensor gets a zero gradient.")
            .at(Some(loc))
            .fix("Freeze with `requires_grad_(False)` instead, or return a non-zero rescaled gradient."),
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
    fn scaling_hooks_are_fine() {
        let src = "w.register_hook(lambda g: g * 0.5)\nh.register_hook(lambda g: g.clamp(-1, 1))\n";
        assert!(codes(src).is_empty());
    }
}
