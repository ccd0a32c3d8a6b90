//! GS140 `nan`: the first non-finite gradient, traced to the op and line that made it.

use gradsleuth_model::capture::TensorStats;
use gradsleuth_model::{Finding, Related, Severity};

use super::super::Check;
use super::{events, span};
use crate::Context;

pub const CHECK: Check = Check { code: "GS140", run };

fn stats(s: &TensorStats) -> String {
    let mut parts = vec![format!("{:?} {}", s.shape, s.dtype)];
    if let (Some(lo), Some(hi)) = (s.min, s.max) {
        parts.push(format!("min {lo:.3e}, max {hi:.3e}"));
    }
    if s.zeros > 0 {
        parts.push(format!("{} zero(s)", s.zeros));
    }
    if s.nan > 0 || s.inf > 0 {
        parts.push(format!("{} NaN, {} Inf", s.nan, s.inf));
    }
    parts.join(", ")
}

fn run(ctx: &Context) -> Vec<Finding> {
    let Some((w, evs)) = events(ctx, "nonfinite") else {
        return Vec::new();
    };
    let e = evs[0];
    let mut msg = format!(
        "Gradients became NaN/Inf at step {} ({} parameter(s); {} in all)",
        e.step,
        e.names.len(),
        span(e)
    );
    let mut f = CHECK.finding(Severity::Error, String::new());
    f.params = e.names.clone();
    super::claim_names(
        ctx,
        &w.params
            .iter()
            .filter(|p| p.first_nonfinite_step.is_some())
            .map(|p| p.name.clone())
            .collect::<Vec<_>>(),
    );
    f.steps = vec![e.step as u32];
    match &w.nan {
        Some(t) => {
            if let (Some(node), Some(at)) = (&t.backward_node, &t.backward_at) {
                msg.push_str(&format!(
                    ": the first non-finite gradient comes from `{node}`, the backward of `{}` at line {}",
                    t.backward_op.as_deref().unwrap_or("?"),
                    at.line
                ));
                f.location = ctx.locate(Some(at));
                f.chain.push(format!(
                    "forward `{}` (line {})",
                    t.backward_op.as_deref().unwrap_or("?"),
                    at.line
                ));
                f.chain.push(format!(
                    "backward `{node}` turns finite gradients into NaN/Inf ✗"
                ));
            }
            if let (Some(op), Some(at)) = (&t.forward_op, &t.forward_at) {
                let inputs: Vec<String> = t.forward_inputs.iter().map(stats).collect();
                let text = format!(
                    "the first forward op with a non-finite output: `{op}`{}",
                    if inputs.is_empty() {
                        String::new()
                    } else {
                        format!(" on inputs [{}]", inputs.join("; "))
                    }
                );
                if f.location.is_none() {
                    msg.push_str(&format!(": {text} at line {}", at.line));
                    f.location = ctx.locate(Some(at));
                } else if let Some(loc) = ctx.locate(Some(at)) {
                    f.related.push(Related {
                        location: loc,
                        message: text,
                    });
                }
            }
            if t.from_loss && f.location.is_some() {
                msg.push_str(", in the loss computation outside the model (the gradient reaching the model's output is already non-finite)");
            } else if t.from_loss {
                msg.push_str(": the gradient reaching the model's output is already non-finite, so the loss computation made it");
            }
            if f.location.is_none() && !t.from_loss {
                msg.push_str(&format!(" (not localized: {})", t.notes.join("; ")));
            }
        }
        None => msg.push_str(" (the step could not be re-run to localize it)"),
    }
    msg.push('.');
    f.message = msg;
    f = f.fix("Guard the op: add an epsilon (`torch.sqrt(x + 1e-12)`, `x / x.norm().clamp_min(1e-12)`), clamp inputs of log/div, or lower the learning rate if values overflow.");
    vec![f]
}

#[cfg(test)]
mod tests {
    use gradsleuth_model::capture::{NanTrace, WatchEvent, WatchRec};
    use gradsleuth_model::Location;

    use super::CHECK;
    use crate::checks::testing::healthy;

    #[test]
    fn names_the_backward_node_and_its_forward_line() {
        let mut s = healthy(3);
        let src = s.source(
            "def forward(self, x):\n    d = (x - self.c).norm(dim=-1)\n    return torch.sqrt(d)\n",
        );
        s.capture.watch = Some(WatchRec {
            steps: 40,
            events: vec![WatchEvent {
                kind: gradsleuth_model::capture::WatchEventKind::Nonfinite,
                step: 17,
                until: 40,
                names: vec!["fc.weight".into()],
                ..Default::default()
            }],
            nan: Some(NanTrace {
                step: 17,
                backward_node: Some("SqrtBackward0".into()),
                backward_op: Some("torch.sqrt".into()),
                backward_at: Some(Location::new(src.clone(), 3)),
                method: "replay".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message
                .contains("`SqrtBackward0`, the backward of `torch.sqrt` at line 3"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].location.as_ref().unwrap().line, 3);
        assert_eq!(f[0].steps, vec![17]);
    }

    #[test]
    fn nothing_without_an_event() {
        let mut s = healthy(3);
        s.capture.watch = Some(WatchRec {
            steps: 10,
            ..Default::default()
        });
        assert!(s.run(&CHECK).is_empty());
    }
}
