//! GS141 `exploding`: a layer's gradient norm jumped far above its usual size.

use gradsleuth_model::{Finding, Severity};

use super::super::Check;
use super::{layer_findings, layer_label, span};
use crate::Context;

pub const CHECK: Check = Check { code: "GS141", run };

fn run(ctx: &Context) -> Vec<Finding> {
    layer_findings(ctx, "exploding", |e, layer| {
        CHECK.finding(Severity::Warning,
            format!(
                "Gradients of `{}` exploded at {}: norm {:.3e}, {}.",
                layer_label(layer),
                span(e),
                e.value.unwrap_or(f64::NAN),
                e.detail
            ),
        )
        .fix("Clip gradients (`torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`), lower the learning rate or add a warmup.")
    })
}

#[cfg(test)]
mod tests {
    use gradsleuth_model::capture::{WatchEvent, WatchParam, WatchRec};

    use super::CHECK;
    use crate::checks::testing::healthy;

    #[test]
    fn one_finding_per_exploding_layer_with_its_parameters() {
        let mut s = healthy(3);
        s.capture.watch = Some(WatchRec {
            steps: 100,
            params: vec![WatchParam {
                name: "fc.weight".into(),
                layer: "fc".into(),
                ..Default::default()
            }],
            events: vec![WatchEvent {
                kind: gradsleuth_model::capture::WatchEventKind::Exploding,
                step: 40,
                until: 42,
                names: vec!["fc".into()],
                value: Some(3e4),
                detail: "300.0× its usual norm 1.000e2".into(),
            }],
            ..Default::default()
        });
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].params, vec!["fc.weight"]);
        assert!(
            f[0].message
                .contains("`fc` (Linear) exploded at steps 40-42"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn quiet_runs_have_none() {
        let mut s = healthy(3);
        s.capture.watch = Some(WatchRec {
            steps: 100,
            ..Default::default()
        });
        assert!(s.run(&CHECK).is_empty());
    }
}
