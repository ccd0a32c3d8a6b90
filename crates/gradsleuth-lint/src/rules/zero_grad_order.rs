//! GS309: `zero_grad()` between `backward()` and `step()` in the same block.

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt};

use super::Rule;
use crate::checker::Checker;

pub const RULE: Rule = Rule { code: "GS309" };

/// Method calls (`.backward()`, `.zero_grad()`, `.step()`) anywhere in a statement; a
/// `.step()` that applies no gradient (see [`steps_no_gradient`]) is left out.
struct Calls<'c, 'a>(Vec<String>, &'c Checker<'a>);

impl<'a> Visitor<'a> for Calls<'_, '_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            if let Expr::Attribute(a) = c.func.as_ref() {
                if a.attr.id.as_str() != "step" || !steps_no_gradient(self.1, &a.value) {
                    self.0.push(a.attr.id.to_string());
                }
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

pub(crate) fn calls(ck: &Checker, s: &Stmt) -> Vec<String> {
    let mut c = Calls(Vec::new(), ck);
    // `obs, reward, done, info = env.step(action)`: a step whose result is unpacked is an
    // environment's, not an optimizer's (which returns at most the closure's loss).
    if let Stmt::Assign(a) = s {
        if matches!(a.targets.as_slice(), [Expr::Tuple(_) | Expr::List(_)]) {
            if let Expr::Call(call) = a.value.as_ref() {
                if let Expr::Attribute(at) = call.func.as_ref() {
                    if at.attr.id.as_str() == "step" {
                        c.visit_expr(&at.value);
                        for arg in call.arguments.args.iter() {
                            c.visit_expr(arg);
                        }
                        return c.0;
                    }
                }
            }
        }
    }
    c.visit_stmt(s);
    c.0
}

/// The receiver of a `.step()` applies no gradient: a learning-rate schedule or a weight
/// average, by how the file builds it (`lr_scheduler = get_scheduler(...)`,
/// `ema_model = EMAModel(...)`) or, built elsewhere, by its name (`self.lr_scheduler`,
/// `model_ema`).
pub(crate) fn steps_no_gradient(ck: &Checker, receiver: &Expr) -> bool {
    let Some(name) = crate::checker::dotted(receiver) else {
        return false;
    };
    // Built in this file by calls only: what they build decides.
    if let Some(built) = ck.built_by(&name).filter(|b| b.iter().all(Option::is_some)) {
        return built
            .iter()
            .flatten()
            .all(|c| crate::flow::is_schedule_ctor(c));
    }
    let last = name
        .rsplit('.')
        .next()
        .unwrap_or(&name)
        .to_ascii_lowercase();
    last.contains("sched")
        || last
            .split('_')
            .any(|w| w == "ema" || w == "swa" || w == "averaged")
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
    ck: &Checker,
    body: &'a [Stmt],
    mut pick: impl FnMut(&'a Stmt) -> Option<&'a Stmt>,
) -> Option<&'a Stmt> {
    let mut after_backward = false;
    let mut pending: Option<&Stmt> = None;
    let mut flat = Vec::new();
    in_line(body, &mut flat);
    for s in flat {
        let names = calls(ck, s);
        let has = |n: &str| names.iter().any(|x| x == n);
        if pending.is_some() && has("step") {
            return pending;
        }
        if has("backward") {
            after_backward = true;
            pending = None;
            continue;
        }
        if has("step") {
            // The gradients are applied: what follows prepares the next iteration (a
            // `zero_grad()` after the step, before diffusers' `ema_model.step(...)`).
            after_backward = false;
            continue;
        }
        if after_backward {
            if let Some(w) = pick(s) {
                pending = Some(w);
            }
        }
    }
    None
}

pub fn check(ck: &mut Checker, body: &[Stmt]) {
    let zero_grad = |s| calls(ck, s).iter().any(|c| c == "zero_grad").then_some(s);
    if let Some(z) = before_step(ck, body, zero_grad) {
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

    /// diffusers' training scripts: the schedule steps and the gradients are zeroed after the
    /// optimizer's step, then the EMA copy of the weights steps.
    #[test]
    fn zero_grad_after_the_step_then_an_ema_step_is_fine() {
        let src = "ema_model = EMAModel(model.parameters(), decay=0.9999)\nlr_scheduler = get_scheduler('cosine', optimizer=optimizer)\nfor batch in data:\n    loss = model(batch).sum()\n    loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    optimizer.step()\n    lr_scheduler.step()\n    optimizer.zero_grad()\n    ema_model.step(model.parameters())\n";
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        // Without the optimizer's step first, the EMA's step is no step: still the bug.
        let src = "ema_model = EMAModel(model.parameters())\nfor batch in data:\n    loss = model(batch).sum()\n    loss.backward()\n    optimizer.zero_grad()\n    ema_model.step(model.parameters())\n    optimizer.step()\n";
        assert_eq!(codes(src), vec![("GS309".into(), 5)]);
        // A schedule stepped between the backward and the zeroing does not apply gradients.
        let src = "for batch in data:\n    loss = model(batch).sum()\n    loss.backward()\n    self.lr_scheduler.step()\n    optimizer.zero_grad()\n    optimizer.step()\n";
        assert_eq!(codes(src), vec![("GS309".into(), 5)]);
    }

    #[test]
    fn the_usual_order_is_fine() {
        let src = "for x in data:\n    opt.zero_grad()\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n    opt.zero_grad()\n";
        assert!(codes(src).is_empty());
    }
}
