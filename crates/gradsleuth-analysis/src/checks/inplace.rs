//! GS208 `inplace_saved` and GS209 `inplace_leaf`: the in-place op behind an autograd error.

use gradsleuth_model::{Category, Finding, Severity};

use super::Check;
use crate::Context;

pub mod saved {
    use super::*;

    pub const CHECK: Check = Check {
        code: "GS208",
        name: "inplace-saved",
        category: Category::InplaceSaved,
        doc: "Autograd saves some tensors for backward (the output of sigmoid/relu/exp, the inputs of mul/matmul) and checks their version counter. An in-place op (`x += 1`, `x.relu_()`, `x[mask] = 0`, `nn.ReLU(inplace=True)`) on such a tensor before backward raises \"one of the variables needed for gradient computation has been modified by an inplace operation\", naming only the backward node. gradsleuth names the line of the in-place op and, as related, where the tensor was created and where it was used (and saved) before.",
        run,
    };

    fn run(ctx: &Context) -> Vec<Finding> {
        ctx.capture
            .inplace
            .iter()
            .filter(|e| e.kind == "inplace_saved")
            .map(|e| {
                let shape = if e.shape.is_empty() { String::new() } else { format!(" of shape {:?}", e.shape) };
                Finding::new(
                    CHECK.code,
                    CHECK.category,
                    Severity::Error,
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

    pub const CHECK: Check = Check {
        code: "GS209",
        name: "inplace-leaf",
        category: Category::InplaceLeaf,
        doc: "An in-place op on a leaf tensor that requires grad (a parameter, or an input created with `requires_grad=True`) outside `torch.no_grad()` raises \"a leaf Variable that requires grad is being used in an in-place operation\". Manual weight updates and initialisation must run under `torch.no_grad()`.",
        run,
    };

    fn run(ctx: &Context) -> Vec<Finding> {
        ctx.capture
            .inplace
            .iter()
            .filter(|e| e.kind == "inplace_leaf")
            .map(|e| {
                Finding::new(
                    CHECK.code,
                    CHECK.category,
                    Severity::Error,
                    format!("`{}` modifies in place a leaf tensor that requires grad (a parameter or an input with requires_grad=True).", e.op),
                )
                .at(ctx.locate(e.location.as_ref()))
                .fix("Wrap manual updates and initialisation in `with torch.no_grad():`, or use an out-of-place op.")
            })
            .collect()
    }
}
