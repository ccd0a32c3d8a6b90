//! GS327: `loss.backward` written without its call: no gradient is ever computed.

use ruff_python_ast::StmtExpr;

use super::{bare_method, Rule};
use crate::checker::Checker;

pub const RULE: Rule = Rule { code: "GS327" };

pub fn check(ck: &mut Checker, stmt: &StmtExpr) {
    bare_method(
        ck,
        stmt,
        "backward",
        &RULE,
        "is referenced, not called: no gradient is computed, so nothing learns",
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_a_backward_without_parentheses() {
        let src = "loss = model(x).sum()\nloss.backward\nopt.step()\n";
        assert_eq!(codes(src), vec![("GS327".into(), 2)]);
    }
}
