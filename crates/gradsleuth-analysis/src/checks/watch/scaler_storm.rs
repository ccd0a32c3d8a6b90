//! GS145 `scaler_skipped`: GradScaler skipping most steps well after its calibration.

use gradsleuth_model::{Finding, Severity};

use super::super::Check;
use super::{events, span};
use crate::Context;

pub const CHECK: Check = Check { code: "GS145", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let Some((w, evs)) = events(ctx, "scaler_storm") else {
        return Vec::new();
    };
    let (total, skipped) = w.scaler.unwrap_or((0, 0));
    evs.into_iter()
        .map(|e| {
            let mut f = CHECK.finding(Severity::Error,
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
                kind: gradsleuth_model::capture::WatchEventKind::ScalerStorm,
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
