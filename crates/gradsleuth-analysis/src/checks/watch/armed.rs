//! GS146: what an op-level step armed by an anomaly found. When a parameter stops getting a
//! gradient mid-run (or a layer dies, explodes, vanishes), `watch` traces the next training step
//! at op level with a tracer of its own; the cuts that step shows (a detach switched on, a
//! `no_grad` block, a round trip) are reported here with their own codes and lines, marked with
//! the anomaly and step that armed them.

use gradsleuth_model::Finding;

use super::super::Check;
use crate::Context;

pub const CHECK: Check = Check { code: "GS146", run };

fn run(ctx: &Context) -> Vec<Finding> {
    ctx.capture
        .watch
        .as_ref()
        .map(|w| w.deep.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use gradsleuth_model::capture::WatchRec;
    use gradsleuth_model::{Category, Finding, Severity};

    use super::CHECK;
    use crate::checks::testing::healthy;

    #[test]
    fn armed_findings_are_reported_as_found() {
        let mut s = healthy(3);
        let f = Finding::new(
            "GS201",
            Category::Detach,
            Severity::Error,
            "(op-level step armed by `stopped` at step 45) cut",
        );
        s.capture.watch = Some(WatchRec {
            steps: 80,
            deep: vec![f],
            ..Default::default()
        });
        let out = s.run(&CHECK);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].code, "GS201");
        s.capture.watch = Some(WatchRec {
            steps: 80,
            ..Default::default()
        });
        assert!(s.run(&CHECK).is_empty());
    }
}
