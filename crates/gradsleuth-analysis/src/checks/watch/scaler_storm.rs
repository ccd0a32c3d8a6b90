//! GS145 `scaler_skipped`: GradScaler skipping most steps well after its calibration.

use gradsleuth_model::{Category, Finding, Severity};

use super::super::Check;
use super::{events, span};
use crate::Context;

pub const CHECK: Check = Check {
    code: "GS145",
    name: "scaler-skip-storm",
    category: Category::ScalerSkipped,
    doc: "GradScaler skips `optimizer.step()` whenever the scaled gradients overflow and halves \
          the scale. In the first `scaler_window` (20) steps that is calibration and normal; \
          afterwards, skipping at least half (`scaler_skip_fraction`) of a window of steps means \
          the gradients are non-finite most of the time (fp16 overflow in the forward, a \
          `log(0)`), so the model barely trains while the loop runs on.",
    run,
};

fn run(ctx: &Context) -> Vec<Finding> {
    let Some((w, evs)) = events(ctx, "scaler_storm") else {
        return Vec::new();
    };
    let (total, skipped) = w.scaler.unwrap_or((0, 0));
    evs.into_iter()
        .map(|e| {
            let mut f = Finding::new(
                CHECK.code,
                CHECK.category,
                Severity::Error,
                format!(
                    "GradScaler skip storm at {}: {} ({skipped} of {total} scaler steps skipped in all).",
                    span(e),
                    e.detail
                ),
            );
            f.steps = vec![e.step as u32];
            f.fix("Find the non-finite values (GS140 traces the first NaN to its op), or run the overflowing op in float32 (`torch.autocast(..., enabled=False)` around it).")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use gradsleuth_model::capture::{WatchEvent, WatchRec};

    use super::CHECK;
    use crate::checks::testing::healthy;

    #[test]
    fn reports_the_storm_with_totals() {
        let mut s = healthy(3);
        s.capture.watch = Some(WatchRec {
            steps: 100,
            scaler: Some((100, 61)),
            events: vec![WatchEvent {
                kind: "scaler_storm".into(),
                step: 30,
                until: 100,
                names: vec!["GradScaler".into()],
                detail: "GradScaler skipped 55% of the last 20 steps".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let f = s.run(&CHECK);
        assert!(f[0].message.contains("61 of 100 scaler steps skipped"));
        s.capture.watch.as_mut().unwrap().events.clear();
        assert!(s.run(&CHECK).is_empty());
    }
}
