//! GS215 `grad_cleared`: the script's own code clears gradients between `backward()` and the
//! optimizer's step (`p.grad = None`, `p.grad.zero_()`), and those parameters never change.
//! Every trained parameter cleared is the zero-grad-order bug written by hand (an error); a
//! part of the model cleared is freezing by hand (an info line: it may be deliberate).

use gradsleuth_model::{Category, Finding, Severity};

use super::{name_list, plural, trainable_params, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS215", run };

/// How the write reads in the user's code.
fn shown(op: &str) -> String {
    match op.strip_prefix("Tensor.") {
        Some("grad") => "`p.grad = ...`".to_owned(),
        Some("data") => "`p.grad.data = ...`".to_owned(),
        Some("__setitem__") => "`p.grad[...] = ...`".to_owned(),
        Some(m) => format!("`p.grad.{m}()`"),
        // a function the script called on the gradient (`nn.init.zeros_(p.grad)`)
        None => format!("`{op}(...)`"),
    }
}

fn run(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for cut in ctx
        .capture
        .cuts
        .iter()
        .filter(|c| c.kind == Category::ZeroGradOrder)
    {
        let keys: Vec<u64> = cut
            .params
            .iter()
            .copied()
            .filter(|k| {
                ctx.facts.get(*k).is_some_and(|f| {
                    // A step the script raised before reaching proves nothing cleared.
                    f.visible && !f.learns() && !f.step_not_reached && !ctx.is_claimed(*k)
                })
            })
            .collect();
        if keys.is_empty() {
            continue;
        }
        ctx.claim(keys.iter().copied());
        let names = super::names(ctx, &keys);
        let learning = trainable_params(ctx).filter(|(_, f)| f.learns()).count();
        let write = shown(&cut.op);
        let finding = if learning == 0 {
            CHECK
                .finding(
                    Severity::Error,
                    format!("{write} here clears the gradients of every trained parameter ({}) after `backward()` and before the optimizer's step: the step sees no gradient, so nothing changes.", plural(keys.len(), "parameter")),
                )
                .fix("Clear gradients before the forward (`optimizer.zero_grad()` at the top of the iteration), never between `backward()` and `step()`.")
        } else {
            CHECK
                .finding(
                    Severity::Info,
                    format!("{write} here clears the gradients of {} after `backward()` and before the optimizer's step: the step has no gradient for them, so they never change (freezing by hand).", name_list(&names)),
                )
                .fix("To freeze them on purpose, `requires_grad_(False)` says so and saves their backward (with momentum or weight decay, a zeroed gradient still moves a weight; a cleared one does not).")
        };
        out.push(
            finding
                .params(names)
                .at(ctx.locate(cut.location.as_ref()))
                .chain([
                    "backward(): gradients computed".into(),
                    format!("{write}: gradients cleared ✗"),
                    "step(): nothing to apply".into(),
                ]),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::CutRec;
    use gradsleuth_model::Location;

    /// `healthy`'s model over two steps; the script clears `keys`' gradients at line 22
    /// (no gradient at the step, the weight unchanged).
    fn cleared(keys: &[u64]) -> Scenario {
        let mut s = healthy(0);
        s.capture.root_calls = 2;
        for i in 0..2 {
            s.backward(&[10, 11], &[]);
            let w = 1.0 + f64::from(i);
            let row = |k: u64| {
                if keys.contains(&k) {
                    (k, None, w, w)
                } else {
                    (k, Some(0.5), w, w + 0.1)
                }
            };
            s.step(100, &[row(10), row(11)]);
        }
        s.capture.cuts.push(CutRec {
            kind: Category::ZeroGradOrder,
            op: "Tensor.grad".into(),
            location: Some(Location::new("train.py", 22)),
            params: keys.to_vec(),
            step: 1,
            ..Default::default()
        });
        s
    }

    #[test]
    fn part_of_the_model_cleared_by_hand_is_an_info_line_at_the_write() {
        let s = cleared(&[11]);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].params, vec!["fc.bias"]);
        assert_eq!(f[0].location.as_ref().map(|l| l.line), Some(22));
        assert!(f[0].message.contains("`p.grad = ...`"), "{}", f[0].message);
    }

    #[test]
    fn every_parameter_cleared_is_an_error() {
        let s = cleared(&[10, 11]);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Error);
    }

    #[test]
    fn a_write_that_leaves_the_parameter_learning_is_not_told() {
        let mut s = healthy(2);
        s.capture.cuts.push(CutRec {
            kind: Category::ZeroGradOrder,
            op: "Tensor.mul_".into(),
            params: vec![10],
            step: 1,
            ..Default::default()
        });
        assert!(s.run(&CHECK).is_empty());
    }
}
