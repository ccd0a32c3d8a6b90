//! GS208 `inplace_saved` and GS209 `inplace_leaf`: the in-place op behind an autograd error.

use gradsleuth_model::capture::{InplaceRec, OPTIMIZER_STEP_SUFFIX};
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
                if e.op.ends_with(OPTIMIZER_STEP_SUFFIX) {
                    return stepped(ctx, e, &shape);
                }
                // No node: autograd saved an input or a leaf itself.
                let (made, maker) = if e.node.is_empty() {
                    (" (an input or a leaf)".to_owned(), "the tensor exists (version 0)".to_owned())
                } else {
                    (format!(" (the output of {})", e.node), format!("{} creates the tensor (version 0)", e.node))
                };
                CHECK.finding(Severity::Error,
                    format!(
                        "`{}` modifies in place a tensor{shape} that autograd saved for backward{made}, so backward fails.",
                        e.op
                    ),
                )
                .at(ctx.locate(e.location.as_ref()))
                .related(ctx.locate(e.saved_at.as_ref()), "used (and saved for backward) here, before the in-place change")
                .related(ctx.locate(e.created_at.as_ref()), if e.node.is_empty() { "created here".to_owned() } else { format!("created here ({})", e.node) })
                .chain([maker, "an op saves it for backward".into(), format!("`{}` bumps its version to {} ✗", e.op, e.version)])
                .fix("Use the out-of-place op (`x = x + 1`, `x = x.relu()`, `torch.where(mask, 0, x)`, `nn.ReLU(inplace=False)`), or `.clone()` before modifying.")
            })
            .collect()
    }

    /// An optimizer's step updated a parameter that a graph still to be backpropagated had
    /// saved (a GAN's generator loss on the discriminator's output, after the discriminator's
    /// step): the fix is the order of the steps, not an out-of-place op.
    fn stepped(ctx: &Context, e: &InplaceRec, shape: &str) -> Finding {
        let names = e
            .param
            .map(|k| super::super::names(ctx, &[k]))
            .unwrap_or_default();
        let what = match names.first() {
            Some(n) => format!("the parameter `{n}`"),
            None => format!("a parameter{shape}"),
        };
        let call = e.op.strip_suffix(OPTIMIZER_STEP_SUFFIX).unwrap_or(&e.op);
        CHECK
            .finding(
                Severity::Error,
                format!(
                    "`{}` updates {what} in place while a graph that saved it for backward has not been backpropagated yet, so that backward fails.",
                    e.op
                ),
            )
            .params(names)
            .at(ctx.locate(e.location.as_ref()))
            .related(ctx.locate(e.saved_at.as_ref()), "used (and saved for backward) here, before the step changed it")
            .chain([
                "the forward saves the parameter for backward".into(),
                format!("`{}` updates it in place (version {}) ✗", e.op, e.version),
                "a later backward() through that graph fails".into(),
            ])
            .fix(format!(
                "Run every backward that goes through this graph before `{call}`'s step changes its parameters (e.g. the generator's loss `backward()` before the discriminator's `step()`), or run the forward again after the step (the discriminator on the generated batch anew). `retain_graph=True` does not help: what the graph saved is stale once the step has run."
            ))
    }

    #[cfg(test)]
    mod tests {
        use super::super::super::testing::*;
        use super::*;

        fn with_write(op: &str, node: &str, param: Option<u64>) -> Vec<Finding> {
            let mut s = healthy(1);
            s.capture.inplace.push(InplaceRec {
                op: op.into(),
                location: Some(gradsleuth_model::Location::new("train.py", 21)),
                node: node.into(),
                shape: vec![16],
                version: 1,
                kind: Category::InplaceSaved,
                param,
                ..Default::default()
            });
            s.run(&CHECK)
        }

        #[test]
        fn an_optimizer_step_is_told_by_the_parameter_it_updated() {
            let f = with_write("Adam.step()", "AsStrided", Some(10));
            assert_eq!(f[0].params, vec!["fc.weight"]);
            // The view autograd names is not said: torch spells it differently by version
            // (`AsStrided`, `AsStridedBackward0`), and the parameter is what the user knows.
            assert!(f[0].message.starts_with("`Adam.step()` updates the parameter `fc.weight` in place while a graph that saved it for backward has not"), "{}", f[0].message);
            // A parameter saved itself (no node made it): no empty node named.
            let f = with_write("Adam.step()", "", Some(10));
            assert!(!f[0].message.contains("output of"), "{}", f[0].message);
            assert!(f[0]
                .fix
                .as_deref()
                .unwrap_or("")
                .contains("before `Adam`'s step"));
        }

        #[test]
        fn a_saved_input_is_not_called_the_output_of_a_node() {
            let f = with_write("Tensor.mul_", "", None);
            assert!(
                f[0].message
                    .contains("saved for backward (an input or a leaf)"),
                "{}",
                f[0].message
            );
            assert!(
                !f[0].chain.iter().any(|c| c.starts_with(' ')),
                "{:?}",
                f[0].chain
            );
        }
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
