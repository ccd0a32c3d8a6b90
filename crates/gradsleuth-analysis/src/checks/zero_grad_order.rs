//! GS108 `zero_grad_order`: gradients cleared between `backward()` and `step()`.

use gradsleuth_model::{Finding, Severity};

use super::{plural, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS108", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let cap = ctx.capture;
    let mut out = Vec::new();
    let mut reported_opts = std::collections::HashSet::new();
    for (i, step) in cap.steps.iter().enumerate() {
        let prev = cap.steps[..i]
            .iter()
            .rev()
            .find(|s| s.optimizer == step.optimizer)
            .map_or(0, |s| s.seq);
        let Some(last_bw) = cap
            .backwards
            .iter()
            .rfind(|b| b.seq > prev && b.seq < step.seq)
        else {
            continue;
        };
        let Some(zg) = cap
            .zero_grads
            .iter()
            .find(|z| z.seq > last_bw.seq && z.seq < step.seq)
        else {
            continue;
        };
        let reached: Vec<u64> = cap
            .backwards
            .iter()
            .filter(|b| b.seq > prev && b.seq < step.seq)
            .flat_map(|b| b.reached.iter().copied())
            .collect();
        let lost: Vec<u64> = step
            .grad_norms
            .iter()
            .filter(|(k, n)| reached.contains(k) && n.is_none_or(|x| x == 0.0))
            .map(|(k, _)| *k)
            .collect();
        if lost.is_empty() || !reported_opts.insert(step.optimizer) {
            continue;
        }
        let keys: Vec<u64> = lost
            .into_iter()
            .filter(|k| ctx.facts.get(*k).is_some_and(|f| f.visible && !f.learns()))
            .collect();
        if keys.is_empty() {
            continue;
        }
        let steps: Vec<u32> = cap
            .steps
            .iter()
            .filter(|s| s.optimizer == step.optimizer)
            .map(|s| s.index)
            .collect();
        ctx.claim(keys.iter().copied());
        let target = if zg.target == gradsleuth_model::capture::ZeroGradTarget::Module {
            "model.zero_grad()"
        } else {
            "optimizer.zero_grad()"
        };
        out.push(
            CHECK.finding(Severity::Error,
                format!(
                    "`{target}` runs after `backward()` and before `step()`: the step sees no gradient, so {} never change.",
                    plural(keys.len(), "parameter")
                ),
            )
            .params(super::names(ctx, &keys))
            .at(ctx.locate(zg.location.as_ref()))
            .related(ctx.locate(last_bw.location.as_ref()), "backward() computes the gradients here")
            .chain(["backward(): gradients accumulated".into(), format!("{target}: gradients cleared ✗"), "step(): nothing to apply".into()])
            .fix(format!("Move `{target}` to the start of the iteration (before the forward pass), or right after `optimizer.step()`."))
            .steps(steps),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn scenario(zero_between: bool) -> Scenario {
        let mut s = healthy(0);
        for _ in 0..2 {
            if !zero_between {
                s.zero_grad(100, 41);
            }
            s.backward(&[10, 11], &[]);
            if zero_between {
                s.zero_grad(100, 42);
            }
            let g = if zero_between { None } else { Some(0.3) };
            let after = if zero_between { 1.0 } else { 1.1 };
            s.step(100, &[(10, g, 1.0, after), (11, g, 1.0, after)]);
        }
        s
    }

    #[test]
    fn clearing_between_backward_and_step_is_found_at_its_line() {
        let f = scenario(true).run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].location.as_ref().unwrap().line, 42);
        assert_eq!(f[0].params.len(), 2);
    }

    #[test]
    fn the_usual_order_is_fine() {
        assert!(scenario(false).run(&CHECK).is_empty());
    }
}
