//! GS326: `optimizer.step` written without its call: the statement does nothing, and the
//! optimizer never steps.

use ruff_python_ast::StmtExpr;

use super::{bare_method, Rule};
use crate::checker::Checker;

pub const RULE: Rule = Rule { code: "GS326" };

pub fn check(ck: &mut Checker, stmt: &StmtExpr) {
    bare_method(
        ck,
        stmt,
        "step",
        &RULE,
        "is referenced, not called: the optimizer never steps and the weights never change",
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_a_step_without_parentheses() {
        let src =
            "for x in data:\n    opt.zero_grad()\n    model(x).sum().backward()\n    opt.step\n";
        assert_eq!(codes(src), vec![("GS326".into(), 4)]);
    }

    #[test]
    fn a_called_or_passed_step_is_fine() {
        let src = "opt.step()\nscaler.step(opt)\nclosure = opt.step\nrun(opt.step)\n";
        assert!(codes(src).is_empty());
    }
}
