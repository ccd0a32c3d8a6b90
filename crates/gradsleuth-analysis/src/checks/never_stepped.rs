//! GS112 `never_stepped`: an optimizer whose `step()` never ran while backward passes gave its
//! parameters gradients, and nothing else changed them (`optimizer.step()` forgotten, or
//! guarded by a condition that is never true).

use gradsleuth_model::{Finding, Severity};

use super::{plural, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS112", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let cap = ctx.capture;
    let mut out = Vec::new();
    let backwards = cap.backwards.len();
    if backwards == 0 {
        return out;
    }
    for o in &cap.optimizers {
        // A GradScaler that skipped every step is GS109's.
        if cap.steps.iter().any(|s| s.optimizer == o.key)
            || cap.scaler_steps.iter().any(|s| s.optimizer == o.key)
        {
            continue;
        }
        let keys: Vec<u64> = o
            .params
            .iter()
            .copied()
            .filter(|k| {
                ctx.facts.get(*k).is_some_and(|f| {
                    f.visible && f.never_stepped && f.grad_nonzero() && !ctx.is_claimed(*k)
                })
            })
            .collect();
        if keys.is_empty() {
            continue;
        }
        ctx.claim(keys.iter().copied());
        let backward = cap
            .backwards
            .first()
            .and_then(|b| ctx.locate(b.location.as_ref()));
        out.push(
            CHECK
                .finding(
                    Severity::Error,
                    format!(
                        "`{}` never stepped: its `step()` did not run in {backwards} observed backward {}, so the {} it holds get gradients but never change.",
                        o.class,
                        if backwards == 1 { "pass" } else { "passes" },
                        plural(keys.len(), "parameter"),
                    ),
                )
                .params(super::names(ctx, &keys))
                .at(ctx.locate(o.created_at.as_ref()))
                .related(backward, "backward() computes their gradients here")
                .chain([
                    "backward(): gradients accumulated".into(),
                    "optimizer.step(): never called ✗".into(),
                    "weights unchanged".into(),
                ])
                .fix("Call `optimizer.step()` after `loss.backward()` in every iteration (with gradient accumulation, every N iterations: check that the condition guarding it becomes true, e.g. `(i + 1) % accum_steps == 0`)."),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    /// `healthy`'s model and optimizer, with backward passes and no step; the run's
    /// fingerprints say whether the weights changed.
    fn no_step(changed: bool) -> Scenario {
        let mut s = healthy(0);
        for _ in 0..3 {
            s.backward(&[10, 11], &[(10, Some(0.5)), (11, Some(0.2))]);
        }
        s.capture.weight_changes = vec![(10, changed), (11, changed)];
        s
    }

    #[test]
    fn an_optimizer_that_never_steps_is_an_error_at_its_creation() {
        let s = no_step(false);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].message.contains("3 observed backward passes"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].params, vec!["fc.weight", "fc.bias"]);
        assert_eq!(f[0].location.as_ref().map(|l| l.line), Some(30));
        // The parameter table agrees: not learning.
        let r = s.report();
        assert!(r
            .parameters
            .iter()
            .all(|p| p.status == gradsleuth_model::ParamStatus::NotUpdated));
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
    }

    #[test]
    fn weights_changed_by_hand_are_not_told() {
        // A manual update (`p -= lr * p.grad`) with an optimizer used only for `zero_grad()`.
        let s = no_step(true);
        assert!(s.run(&CHECK).is_empty());
        assert!(s.quiet());
    }

    /// The script raised in its second backward (the line after the first): the step it would
    /// have taken next was never reached.
    fn raised_in_second_backward(second_line: u32) -> Scenario {
        let mut s = healthy(0);
        s.backward(&[10, 11], &[(10, Some(0.5)), (11, Some(0.2))]);
        s.backward(&[], &[]);
        let last = s.capture.backwards.last_mut().unwrap();
        last.location = Some(gradsleuth_model::Location::new("train.py", second_line));
        last.error = Some("RuntimeError: modified by an inplace operation".into());
        s.capture.error = Some(gradsleuth_model::capture::ScriptError {
            kind: "RuntimeError".into(),
            message: "one of the variables needed for gradient computation has been modified by an inplace operation".into(),
            location: Some(gradsleuth_model::Location::new("train.py", second_line)),
            ..Default::default()
        });
        s.capture.weight_changes = vec![(10, false), (11, false)];
        s
    }

    #[test]
    fn a_step_the_script_never_reached_before_it_raised_is_not_told() {
        let s = raised_in_second_backward(44);
        assert!(s.run(&CHECK).is_empty());
        // Nor as a parameter no step changed (GS199): the error is what the run says.
        assert!(s.quiet(), "{:?}", s.report().findings);
    }

    #[test]
    fn a_loop_that_came_around_without_the_step_is_told_even_when_it_raised_later() {
        // The same backward line ran twice: an iteration went by without the step.
        let s = raised_in_second_backward(40);
        assert_eq!(s.run(&CHECK).len(), 1);
    }

    #[test]
    fn an_accumulation_loop_that_raised_before_its_first_step_is_not_told() {
        // Two micro-batches per step; the second backward raised, before the step the loop
        // takes after it (every second batch): the step was not due yet.
        let mut s = raised_in_second_backward(4);
        let file = s.source("accumulate = 2\nfor i, x in enumerate(data):\n    loss = model(x) / accumulate\n    loss.backward()\n    if (i + 1) % accumulate == 0:\n        optimizer.step()\n        optimizer.zero_grad()\n");
        for b in &mut s.capture.backwards {
            b.location = Some(gradsleuth_model::Location::new(file.clone(), 4));
        }
        assert!(s.run(&CHECK).is_empty());
        assert!(s.quiet(), "{:?}", s.report().findings);
        // With no step in the loop at all, the loop came around without one: told.
        let file = s.source("for i, x in enumerate(data):\n    loss = model(x)\n    scheduler.step()\n    loss.backward()\n");
        for b in &mut s.capture.backwards {
            b.location = Some(gradsleuth_model::Location::new(file.clone(), 4));
        }
        assert_eq!(s.run(&CHECK).len(), 1);
    }

    #[test]
    fn an_optimizer_that_steps_is_not_told() {
        assert!(healthy(3).run(&CHECK).is_empty());
    }
}
