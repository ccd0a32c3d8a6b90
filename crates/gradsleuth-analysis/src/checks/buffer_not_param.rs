//! GS105 `buffer_not_param`: a tensor meant to learn was registered as a buffer.

use gradsleuth_model::capture::TensorKind;
use gradsleuth_model::{Finding, Severity};

use super::{tensor_assignment, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS105", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for (t, f) in ctx.facts.iter() {
        if t.kind != TensorKind::Buffer || !(t.requires_grad || t.is_parameter) {
            continue;
        }
        ctx.claim([t.key]);
        let gets_grad = f.reached() || f.grad_nonzero();
        let sev = if f.optimizers.is_empty() {
            Severity::Error
        } else {
            Severity::Warning
        };
        let why = if t.is_parameter {
            "an nn.Parameter registered as a buffer"
        } else {
            "a buffer created with requires_grad=True"
        };
        let what = if f.optimizers.is_empty() {
            if gets_grad {
                "it receives gradients but no optimizer updates it"
            } else {
                "no optimizer updates it"
            }
        } else {
            "it is optimized only because it was passed by hand; state_dict and parameters() treat it as a constant"
        };
        out.push(
            CHECK.finding(sev,
                format!("`{}` is {why}: {what}.", t.name),
            )
            .params([t.name.clone()])
            .at(tensor_assignment(ctx, t))
            .chain([
                format!("`{}` registered with register_buffer", t.name),
                "model.parameters() skips buffers".into(),
                "optimizer never sees it ✗".into(),
            ])
            .fix(format!(
                "Register it as a parameter: `self.{0} = nn.Parameter(...)` (or `self.register_parameter(\"{0}\", nn.Parameter(...))`).",
                t.attr
            )),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn flags_a_learnable_buffer() {
        let mut s = healthy(2);
        s.tensor(20, "temperature", 1, TensorKind::Buffer);
        s.capture.backwards[0].reached.push(20);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Error);
        assert!(f[0].message.contains("receives gradients"));
    }

    #[test]
    fn ordinary_buffers_are_fine() {
        let mut s = healthy(2);
        s.tensor(20, "running_mean", 1, TensorKind::Buffer)
            .requires_grad = false;
        assert!(s.run(&CHECK).is_empty());
    }
}
