//! GS104 `non_leaf_param`: a model attribute meant as a parameter is the *result* of an op.

use gradsleuth_model::capture::TensorKind;
use gradsleuth_model::{Finding, Severity};

use super::{tensor_assignment, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS104", run };

/// The user-level operation behind an autograd node name.
pub fn op_of(node: &str) -> &'static str {
    match node.trim_end_matches(|c: char| c.is_ascii_digit()) {
        "ToCopyBackward" => "`.to()` / `.double()` / `.float()` / `.cuda()`",
        "MulBackward" => "`*`",
        "AddBackward" => "`+`",
        "SubBackward" => "`-`",
        "DivBackward" => "`/`",
        "ViewBackward" | "ReshapeAliasBackward" | "UnsafeViewBackward" => {
            "`.view()` / `.reshape()`"
        }
        "TBackward" | "TransposeBackward" | "PermuteBackward" => "a transpose/permute",
        "CloneBackward" => "`.clone()`",
        "UnsqueezeBackward" | "SqueezeBackward" => "`.unsqueeze()` / `.squeeze()`",
        "ExpandBackward" => "`.expand()`",
        _ => "an operation",
    }
}

fn run(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for (t, f) in ctx.facts.iter() {
        if !(t.requires_grad && !t.is_leaf && f.visible && t.kind == TensorKind::Attribute) {
            continue;
        }
        let node = t
            .grad_fn_chain
            .first()
            .cloned()
            .unwrap_or_else(|| "a grad_fn".into());
        let op = op_of(&node);
        let hidden_learns = t
            .leaf
            .and_then(|k| ctx.facts.get(k))
            .is_some_and(|l| l.reached());
        let mut chain = vec![format!("`{}` (model attribute, not a leaf)", t.name)];
        chain.extend(t.grad_fn_chain.iter().map(|n| format!("<- {n}")));
        chain.push("<- the real nn.Parameter: gets .grad, held by no optimizer ✗".into());
        let loc = tensor_assignment(ctx, t);
        let fix = match op {
            o if o.starts_with("`.to()`") => format!(
                "Convert before wrapping: `self.{0} = nn.Parameter(torch.randn(...).to(dtype_or_device))`, or create it as a parameter and move the whole model with `model.to(...)`.",
                t.attr
            ),
            _ => format!(
                "Keep the parameter itself as the attribute (`self.{0} = nn.Parameter(...)`) and apply {op} inside `forward`.",
                t.attr
            ),
        };
        ctx.claim([t.key]);
        ctx.claim(t.leaf);
        out.push(
            CHECK.finding(Severity::Error,
                format!(
                    "`{}` is not a parameter: {op} ({node}) turned the nn.Parameter into a computed tensor, so it is not registered and {}.",
                    t.name,
                    if hidden_learns { "the gradient reaching the hidden parameter is never applied" } else { "nothing updates it" }
                ),
            )
            .params([t.name.clone()])
            .at(loc)
            .chain(chain)
            .fix(fix),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::TensorKind;

    #[test]
    fn names_the_op_and_the_assignment_line() {
        let mut s = healthy(2);
        let file = s.source("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.scale = nn.Parameter(torch.ones(4)).double()\n");
        s.capture.modules[0].class_def = Some(gradsleuth_model::Location::new(file, 1));
        let t = s.tensor(20, "scale", 1, TensorKind::Attribute);
        t.is_leaf = false;
        t.grad_fn_chain = vec!["ToCopyBackward0".into(), "AccumulateGrad".into()];
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].params, vec!["scale"]);
        assert_eq!(f[0].location.as_ref().unwrap().line, 4);
        assert!(f[0].message.contains(".double()"));
    }

    #[test]
    fn leaves_and_non_grad_tensors_are_fine() {
        let mut s = healthy(1);
        let t = s.tensor(20, "mask", 1, TensorKind::Attribute);
        t.is_leaf = false;
        t.requires_grad = false;
        assert!(s.run(&CHECK).is_empty());
    }
}
