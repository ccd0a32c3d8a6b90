//! GS143 `dead_path`: a layer whose gradient has been exactly zero in every step.

use gradsleuth_model::{Finding, Severity};

use super::super::Check;
use super::{layer_findings, layer_label, span};
use crate::Context;

pub const CHECK: Check = Check { code: "GS143", run };

fn run(ctx: &Context) -> Vec<Finding> {
    layer_findings(ctx, "dead", |e, layer| {
        CHECK.finding(Severity::Error,
            format!(
                "`{}` is dead: its gradient was exactly zero in every step ({}, still at {}).",
                layer_label(layer),
                span(e),
                e.until
            ),
        )
        .fix("Check what zeroes it: ReLUs that never fire (initialisation, a leaky activation), a saturated clamp, an always-false mask.")
    })
}

#[cfg(test)]
mod tests {
    use gradsleuth_model::capture::{WatchEvent, WatchRec};

    use super::CHECK;
    use crate::checks::testing::healthy;

    #[test]
    fn a_dead_layer_is_an_error() {
        let mut s = healthy(3);
        s.capture.watch = Some(WatchRec {
            steps: 50,
            events: vec![WatchEvent {
                kind: gradsleuth_model::capture::WatchEventKind::Dead,
                step: 20,
                until: 50,
                names: vec!["fc".into()],
                ..Default::default()
            }],
            ..Default::default()
        });
        let f = s.run(&CHECK);
        assert_eq!(f[0].severity, gradsleuth_model::Severity::Error);
        assert!(
            f[0].message.starts_with("`fc` (Linear) is dead"),
            "{}",
            f[0].message
        );
        s.capture.watch = None;
        assert!(s.run(&CHECK).is_empty());
    }
}
