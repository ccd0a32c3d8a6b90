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

    fn run(ctx: &Context) -> Vec<Finding> {
        ctx.capture
            .inplace
            .iter()
            .filter(|e| e.kind == Category::InplaceLeaf)
            .map(|e| {
                CHECK.finding(Severity::Error,
                    format!("`{}` modifies in place a leaf tensor that requires grad (a parameter or an input with requires_grad=True).", e.op),
                )
                .at(ctx.locate(e.location.as_ref()))
                .fix("Wrap manual updates and initialisation in `with torch.no_grad():`, or use an out-of-place op.")
            })
            .collect()
    }
}
