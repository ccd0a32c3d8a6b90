//! The lint rules, one file each: code, category, documentation, check, tests.

use gradsleuth_model::{Category, Finding, Severity};

use crate::checker::Checker;
use crate::flow::{CutKind, FlowCut};

pub mod backward_in_no_grad;
pub mod backward_not_called;
pub mod buffer_not_param;
pub mod data_attr;
pub mod detach_cut;
pub mod frozen_then_optimized;
pub mod grad_cleared;
pub mod grad_clip_zero;
pub mod grad_without_create_graph;
pub mod hook_zeroes_grad;
pub mod inplace_param;
pub mod inplace_saved;
pub mod item_roundtrip;
pub mod loss_rewrap;
pub mod no_grad_cut;
pub mod no_grad_forward;
pub mod non_diff_in_loss;
pub mod non_leaf_param;
pub mod optimizer_before_replace;
pub mod optimizer_never_runs;
pub mod optimizer_subset;
pub mod peft_unfreeze;
pub mod recreated_module;
pub mod stale_graph;
pub mod step_before_backward;
pub mod step_not_called;
pub mod tensor_rewrap;
pub mod unregistered;
pub mod update_discarded;
pub mod zero_grad_not_called;
pub mod zero_grad_order;

/// torch.nn layers without parameters that no pattern of [`parameter_free`] covers.
const PARAMETER_FREE: &[&str] = &[
    "ReLU",
    "ReLU6",
    "RReLU",
    "GELU",
    "SiLU",
    "Tanh",
    "Sigmoid",
    "LogSigmoid",
    "LeakyReLU",
    "ELU",
    "SELU",
    "CELU",
    "GLU",
    "Mish",
    "Softmax",
    "Softmax2d",
    "Softmin",
    "LogSoftmax",
    "Softplus",
    "Softsign",
    "Softshrink",
    "Hardshrink",
    "Tanhshrink",
    "Threshold",
    "Hardswish",
    "Hardsigmoid",
    "Hardtanh",
    "Identity",
    "Flatten",
    "Unflatten",
    "Fold",
    "Unfold",
    "Upsample",
    "UpsamplingNearest2d",
    "UpsamplingBilinear2d",
    "PixelShuffle",
    "PixelUnshuffle",
    "ChannelShuffle",
    "CosineSimilarity",
    "PairwiseDistance",
];

/// A torch.nn layer (by its class name) that holds no parameter: activations, dropouts,
/// pooling, padding, reshaping, and the losses (all but `AdaptiveLogSoftmaxWithLoss`, a
/// classifier). Building one anywhere loses nothing.
pub(crate) fn parameter_free(last: &str) -> bool {
    let dims = ["1d", "2d", "3d"];
    PARAMETER_FREE.contains(&last)
        || last.ends_with("Dropout")
        || dims.iter().any(|d| {
            last.strip_suffix(d).is_some_and(|stem| {
                stem.ends_with("Dropout")
                    || stem.ends_with("Pool")
                    || stem.ends_with("Pad")
                    || stem.ends_with("Unpool")
            })
        })
        || (last.ends_with("Loss") && last != "AdaptiveLogSoftmaxWithLoss")
}

/// A lint rule: its code (its name, category and documentation are the rule registry's,
/// `gradsleuth-rules`, shared with the runtime check of the same pitfall).
pub struct Rule {
    pub code: &'static str,
}

impl Rule {
    /// The rule's registry entry.
    pub fn rule(&self) -> gradsleuth_rules::Rule {
        gradsleuth_rules::registered(self.code)
    }

    pub fn name(&self) -> &'static str {
        self.rule().name()
    }

    pub fn category(&self) -> Category {
        self.rule().category()
    }

    /// The documentation, section by section.
    pub fn doc(&self) -> String {
        self.rule().doc()
    }

    pub fn finding(&self, message: impl Into<String>) -> Finding {
        self.rule().finding(Severity::Error, message)
    }
}

pub const ALL: &[&Rule] = &[
    &unregistered::RULE,
    &non_leaf_param::RULE,
    &buffer_not_param::RULE,
    &no_grad_forward::RULE,
    &recreated_module::RULE,
    &data_attr::RULE,
    &loss_rewrap::RULE,
    &grad_clip_zero::RULE,
    &zero_grad_order::RULE,
    &hook_zeroes_grad::RULE,
    &backward_in_no_grad::RULE,
    &grad_without_create_graph::RULE,
    &step_before_backward::RULE,
    &non_diff_in_loss::RULE,
    &frozen_then_optimized::RULE,
    &peft_unfreeze::RULE,
    &detach_cut::RULE,
    &item_roundtrip::RULE,
    &tensor_rewrap::RULE,
    &no_grad_cut::RULE,
    &inplace_param::RULE,
    &inplace_saved::RULE,
    &optimizer_before_replace::RULE,
    &optimizer_subset::RULE,
    &optimizer_never_runs::RULE,
    &stale_graph::RULE,
    &step_not_called::RULE,
    &backward_not_called::RULE,
    &zero_grad_not_called::RULE,
    &update_discarded::RULE,
    &grad_cleared::RULE,
];

/// A statement that is only `<receiver>.<method>` (the call's parentheses forgotten): reported
/// under `rule` with an edit adding them.
pub(crate) fn bare_method(
    ck: &mut Checker,
    stmt: &ruff_python_ast::StmtExpr,
    method: &str,
    rule: &Rule,
    what: &str,
) {
    let ruff_python_ast::Expr::Attribute(a) = stmt.value.as_ref() else {
        return;
    };
    if a.attr.id.as_str() != method {
        return;
    }
    let receiver = crate::checker::text_of(ck.source, a.value.as_ref()).to_owned();
    let loc = ck.location(stmt);
    let end = ruff_text_size::Ranged::range(stmt).end();
    let f = rule
        .finding(format!("`{receiver}.{method}` {what}."))
        .at(Some(loc))
        .fix(format!("Call it: `{receiver}.{method}()`."));
    ck.report_with_edit(f, ruff_text_size::TextRange::new(end, end), "()".into());
}

/// Reports a cut found by the data flow ([`crate::flow`]) under the rule for its kind.
pub(crate) fn dispatch_cut(ck: &mut Checker, cut: &FlowCut) {
    match cut.cut.kind {
        CutKind::Detach => detach_cut::report(ck, cut),
        CutKind::Data => report_cut(
            ck,
            &data_attr::RULE,
            cut,
            "`.data`",
            "Use the tensor itself (or `.detach()` where stopping the gradient is intended).",
        ),
        CutKind::Item => item_roundtrip::report(ck, cut),
        CutKind::Rewrap => tensor_rewrap::report(ck, cut),
        CutKind::NoGrad => no_grad_cut::report(ck, cut),
        CutKind::NoCreateGraph => grad_without_create_graph::report_cut(ck, cut),
        CutKind::NonDiff => report_cut(
            ck,
            &non_diff_in_loss::RULE,
            cut,
            "a non-differentiable op (argmax, rounding, a comparison or an integer cast)",
            "Use a differentiable surrogate (softmax instead of argmax; `x + (x.round() - x).detach()` for rounding).",
        ),
    }
}

/// One finding for a cut: the module that lost its gradient and what cut it.
pub(crate) fn report_cut(ck: &mut Checker, rule: &Rule, cut: &FlowCut, what: &str, fix: &str) {
    let loc = ck.location(&cut.cut.range());
    let target = if cut.in_forward {
        "the module's output"
    } else {
        "the loss"
    };
    ck.report(
        rule.finding(format!(
            "`{}` reaches {target} only through {what}: its parameters get no gradient.",
            cut.source
        ))
        .at(Some(loc))
        .fix(fix),
    );
}

#[cfg(test)]
pub(crate) fn codes(src: &str) -> Vec<(String, u32)> {
    crate::lint_source("t.py", src)
        .unwrap()
        .into_iter()
        .map(|f| (f.code, f.location.map_or(0, |l| l.line)))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn codes_are_unique_and_documented() {
        let mut seen = std::collections::HashSet::new();
        for r in super::ALL {
            assert!(seen.insert(r.code), "{}", r.code);
            assert!(
                gradsleuth_rules::rule(r.code)
                    .is_some_and(|e| e.surface() == gradsleuth_rules::Surface::Lint),
                "{} is not a lint rule in the registry",
                r.code
            );
        }
    }
}
