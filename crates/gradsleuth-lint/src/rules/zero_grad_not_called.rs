//! GS328: `optimizer.zero_grad` written without its call: gradients are never cleared and add
//! up over iterations.

use ruff_python_ast::StmtExpr;

use super::{bare_method, Rule};
use crate::checker::Checker;

pub const RULE: Rule = Rule { code: "GS328" };

pub fn check(ck: &mut Checker, stmt: &StmtExpr) {
    bare_method(
        ck,
        stmt,
        "zero_grad",
        &RULE,
        "is referenced, not called: gradients are never cleared, so each step applies the sum of all earlier ones",
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_a_zero_grad_without_parentheses() {
        let src =
            "for x in data:\n    model.zero_grad\n    model(x).sum().backward()\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS328".into(), 2)]);
    }
}
