//! GS208 `inplace_saved` and GS209 `inplace_leaf`: the in-place op behind an autograd error.

use gradsleuth_model::{Category, Finding, Severity};

use super::Check;
use crate::Context;

pub mod saved {
    use super::*;

    pub const CHECK: Check = Check { code: "GS208", run };

    fn run(ctx: &Context) -> Vec<Finding> {
        ctx.capture
            .inplace
            .iter()
            .filter(|e| e.kind == Category::InplaceSaved)
            .map(|e| {
                let shape = if e.shape.is_empty() { String::new() } else { format!(" of shape {:?}", e.shape) };
                CHECK.finding(Severity::Error,
                    format!(
                        "`{}` modifies in place a tensor{shape} that autograd saved for backward (the output of {}), so backward fails.",
                        e.op, e.node
                    ),
                )
                .at(ctx.locate(e.location.as_ref()))
                .related(ctx.locate(e.saved_at.as_ref()), "used (and saved for backward) here, before the in-place change")
                .related(ctx.locate(e.created_at.as_ref()), format!("created here ({})", e.node))
                .chain([format!("{} creates the tensor (version 0)", e.node), "an op saves it for backward".into(), format!("`{}` bumps its version to {} ✗", e.op, e.version)])
                .fix("Use the out-of-place op (`x = x + 1`, `x = x.relu()`, `torch.where(mask, 0, x)`, `nn.ReLU(inplace=False)`), or `.clone()` before modifying.")
            })
            .collect()
    }
}

pub mod leaf {
    use super::*;

    pub const CHECK: Check = Check { code: "GS209", run };

    const FIX: &str = "Wrap manual updates and initialisation in `with torch.no_grad():`, or use an out-of-place op.";

    fn run(ctx: &Context) -> Vec<Finding> {
        let mut out: Vec<Finding> = ctx.capture
            .inplace
            .iter()
            .filter(|e| e.kind == Category::InplaceLeaf)
            .map(|e| {
                CHECK.finding(Severity::Error,
                    format!("`{}` modifies in place a leaf tensor that requires grad (a parameter or an input with requires_grad=True).", e.op),
                )
                .at(ctx.locate(e.location.as_ref()))
                .fix(FIX)
            })
            .collect();
        // Outside the op-level window (before the first forward: a clamp or an init in the
        // loop's first lines) the op is not recorded, but the script's own error names it,
        // raised at the user's line.
        if out.is_empty() {
            if let Some(e) = ctx.capture.error.as_ref().filter(|e| {
                e.message.contains(
                    "a leaf Variable that requires grad is being used in an in-place operation",
                )
            }) {
                out.push(
                    CHECK.finding(Severity::Error,
                        "An in-place op here modifies a leaf tensor that requires grad (a parameter or an input with requires_grad=True) outside `torch.no_grad()`.".to_owned(),
                    )
                    .at(ctx.locate(e.location.as_ref()))
                    .fix(FIX),
                );
            }
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::super::super::testing::*;
        use super::*;

        #[test]
        fn the_scripts_error_locates_an_in_place_op_on_a_leaf_outside_the_window() {
            let mut s = healthy(1);
            s.capture.error = Some(gradsleuth_model::capture::ScriptError {
                kind: "RuntimeError".into(),
                message:
                    "a leaf Variable that requires grad is being used in an in-place operation."
                        .into(),
                location: Some(gradsleuth_model::Location::new("train.py", 51)),
                ..Default::default()
            });
            let f = s.run(&CHECK);
            assert_eq!(f.len(), 1);
            assert_eq!(f[0].location.as_ref().unwrap().line, 51);
        }
    }
}
