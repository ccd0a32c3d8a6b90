//! GS313: `optimizer.step()` before `loss.backward()` in the same block.

use ruff_python_ast::Stmt;

use super::Rule;
use crate::checker::{text_of, Checker};

pub const RULE: Rule = Rule { code: "GS313" };

fn method_calls(ck: &Checker, s: &Stmt) -> (bool, bool) {
    let text = text_of(ck.source, s);
    (
        text.contains(".step(") && !text.contains("scheduler") && !text.contains("sched."),
        text.contains(".backward("),
    )
}

pub fn check(ck: &mut Checker, body: &[Stmt]) {
    // Only simple statements: a step and a backward in the same compound statement are
    // ordered by their own body.
    let simple: Vec<&Stmt> = body
        .iter()
        .filter(|s| matches!(s, Stmt::Expr(_) | Stmt::Assign(_)))
        .collect();
    let first_step = simple
        .iter()
        .position(|s| method_calls(ck, s).0 && !method_calls(ck, s).1);
    let first_backward = simple.iter().position(|s| method_calls(ck, s).1);
    if let (Some(st), Some(bw)) = (first_step, first_backward) {
        if st < bw {
            let loc = ck.location(simple[st]);
            ck.report(
                RULE.finding("`step()` runs before `backward()` in this iteration: it applies stale (or no) gradients.")
                    .at(Some(loc))
                    .fix("Call `optimizer.step()` after `loss.backward()`."),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_step_before_backward() {
        let src = "for x in data:\n    opt.zero_grad()\n    opt.step()\n    loss = model(x).sum()\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS313".into(), 3)]);
    }

    #[test]
    fn scheduler_steps_and_the_usual_order_are_fine() {
        let src = "for x in data:\n    sched.step()\n    opt.zero_grad()\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n";
        assert!(codes(src).is_empty());
    }
}
