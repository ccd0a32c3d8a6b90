//! GS109 `scaler_skipped`: `GradScaler.step` skipped every observed optimizer step.

use std::collections::BTreeMap;

use gradsleuth_model::{Finding, Severity};

use super::{plural, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS109", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let mut per_opt: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for s in &ctx.capture.scaler_steps {
        let e = per_opt.entry(s.optimizer).or_default();
        e.0 += 1;
        if s.stepped {
            e.1 += 1;
        }
    }
    let mut out = Vec::new();
    for (opt, (calls, stepped)) in per_opt {
        if stepped > 0 || calls == 0 {
            continue;
        }
        let keys: Vec<u64> = ctx
            .capture
            .optimizer(opt)
            .map(|o| {
                o.params
                    .iter()
                    .copied()
                    .filter(|k| ctx.facts.get(*k).is_some_and(|f| f.visible && !f.learns()))
                    .collect()
            })
            .unwrap_or_default();
        ctx.claim(keys.iter().copied());
        let first = ctx.capture.scaler_steps.iter().find(|s| s.optimizer == opt);
        let scales: Vec<f64> = ctx
            .capture
            .scaler_steps
            .iter()
            .filter(|s| s.optimizer == opt)
            .filter_map(|s| s.scale)
            .collect();
        let scale_note = match (scales.first(), scales.last()) {
            (Some(a), Some(b)) if scales.len() > 1 => format!(" (the scale fell from {a} to {b})"),
            _ => String::new(),
        };
        let backward = ctx
            .capture
            .backwards
            .first()
            .and_then(|b| ctx.locate(b.location.as_ref()));
        out.push(
            CHECK.finding(Severity::Error,
                format!(
                    "GradScaler skipped all {} observed optimizer steps because the gradients were inf/NaN every time{scale_note}: the model never changes.",
                    plural(calls, "step").split(' ').next().unwrap_or("0")
                ),
            )
            .params(super::names(ctx, &keys))
            .at(first.and_then(|s| ctx.locate(s.location.as_ref())))
            .related(backward, "the backward whose gradients were non-finite")
            .chain(["loss (scaled)".into(), "backward: gradients contain inf/NaN".into(), "scaler.step(): optimizer.step() skipped ✗".into()])
            .fix("Check `torch.isfinite(loss)` before backward and find the op producing inf/NaN (a log of 0, a mean over an empty mask, an overflow); `gradsleuth run --watch` traces it to the line.")
            .steps(1..=calls as u32),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn every_step_skipped_is_an_error() {
        let mut s = healthy(0);
        for _ in 0..3 {
            s.backward(&[10, 11], &[]);
            s.scaler_step(100, false);
        }
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("all 3"));
        assert_eq!(f[0].params, vec!["fc.weight", "fc.bias"]);
    }

    #[test]
    fn an_early_skip_then_steps_is_normal() {
        let mut s = healthy(0);
        s.scaler_step(100, false);
        s.scaler_step(100, true);
        assert!(s.run(&CHECK).is_empty());
    }
}
