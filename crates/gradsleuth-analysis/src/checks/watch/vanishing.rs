//! GS142 `vanishing`: a layer's gradient stays orders of magnitude below the largest layer's.

use gradsleuth_model::{Finding, Severity};

use super::super::Check;
use super::{layer_findings, layer_label, span};
use crate::Context;

pub const CHECK: Check = Check { code: "GS142", run };

fn run(ctx: &Context) -> Vec<Finding> {
    layer_findings(ctx, "vanishing", |e, layer| {
        CHECK.finding(Severity::Warning,
            format!(
                "Gradients of `{}` vanished over {}: norm {:.3e}, {}.",
                layer_label(layer),
                span(e),
                e.value.unwrap_or(f64::NAN),
                e.detail
            ),
        )
        .fix("Add residual connections or normalisation, use a non-saturating activation, check the initialisation.")
    })
}

#[cfg(test)]
mod tests {
    use gradsleuth_model::capture::{WatchEvent, WatchRec};

    use super::CHECK;
    use crate::checks::testing::healthy;

    #[test]
    fn reports_the_vanishing_layer() {
        let mut s = healthy(3);
        s.capture.watch = Some(WatchRec {
            steps: 60,
            events: vec![WatchEvent {
                kind: gradsleuth_model::capture::WatchEventKind::Vanishing,
                step: 30,
                until: 60,
                names: vec!["layers.0".into()],
                value: Some(1e-12),
                detail: String::new(),
            }],
            ..Default::default()
        });
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(f[0]
            .message
            .contains("`layers.0` vanished over steps 30-60"));
        s.capture.watch.as_mut().unwrap().events[0].kind =
            gradsleuth_model::capture::WatchEventKind::Exploding;
        assert!(s.run(&CHECK).is_empty());
    }
}
