//! GS144: parameters that learned and then stopped getting a gradient mid-run.

use gradsleuth_model::{Finding, Severity};

use super::super::Check;
use super::events;
use crate::Context;

pub const CHECK: Check = Check { code: "GS144", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let Some((_, evs)) = events(ctx, "stopped") else {
        return Vec::new();
    };
    let mut by_step: std::collections::BTreeMap<u64, Vec<&gradsleuth_model::capture::WatchEvent>> =
        Default::default();
    for e in evs {
        by_step.entry(e.step).or_default().push(e);
    }
    by_step
        .into_iter()
        .map(|(step, es)| {
            let names: Vec<String> = es.iter().flat_map(|e| e.names.clone()).collect();
            let mut f = CHECK.finding(Severity::Warning,
                format!(
                    "{} parameter(s) stopped getting a gradient mid-run (none or zero for {} steps by step {step}; {}).",
                    names.len(),
                    ctx.capture.watch.as_ref().map_or(0, |w| w.thresholds.patience),
                    es[0].detail
                ),
            );
            super::claim_names(ctx, &names);
            f.params = names;
            f.steps = vec![step as u32];
            f.fix("Find what changed at that step: a branch that stopped running, requires_grad switched off, a detach or no_grad turned on by a flag.")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use gradsleuth_model::capture::{WatchEvent, WatchRec};

    use super::CHECK;
    use crate::checks::testing::healthy;

    #[test]
    fn groups_parameters_that_stopped_together() {
        let mut s = healthy(3);
        let ev = |n: &str| WatchEvent {
            kind: gradsleuth_model::capture::WatchEventKind::Stopped,
            step: 45,
            until: 45,
            names: vec![n.into()],
            detail: "last non-zero gradient at step 25".into(),
            ..Default::default()
        };
        s.capture.watch = Some(WatchRec {
            steps: 80,
            events: vec![ev("aux.weight"), ev("aux.bias")],
            ..Default::default()
        });
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].params, vec!["aux.weight", "aux.bias"]);
        s.capture.watch.as_mut().unwrap().events.clear();
        assert!(s.run(&CHECK).is_empty());
    }
}
