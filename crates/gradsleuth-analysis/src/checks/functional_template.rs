//! GS192 `functional_template`: a model that only ever ran through
//! `torch.func.functional_call` (or `torch.nn.utils.stateless`, a meta-learning library's
//! functional update) on tensors put in place of its own parameters
//! (`ModuleRec::runs_stateless`). Its own parameters took no part in any forward, so "no
//! gradient reached them" is the design, not a cut:
//! - no optimizer holds them: a template (torch.func's training loops, a meta-learner's base
//!   network): info, and the checks after it (the catch-all's "the path to the loss is cut")
//!   stay quiet about them;
//! - an optimizer holds them: the optimizer steps tensors the forward never uses, while the
//!   tensors passed in are what the loss sees (`{k: v.detach() ...}` handed to
//!   `functional_call`): an error at the line that calls the model (a warning when the rest
//!   of the model learns: a hypernetwork's weight swapped in, the optimizer given all of
//!   `model.parameters()`), unless the op-level capture found the cut itself (the `.detach()`
//!   at its line: said by its check).

use std::collections::{BTreeMap, HashSet};

use gradsleuth_model::{Finding, Severity};

use super::{model_of, names, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS192", run };

fn run(ctx: &Context) -> Vec<Finding> {
    // Per model (root): its parameters whose module ran, always on stand-ins, and that no
    // gradient reached; whether an optimizer holds any of them.
    let mut models: BTreeMap<u64, (Vec<u64>, bool)> = BTreeMap::new();
    let cut: HashSet<u64> = ctx
        .capture
        .cuts
        .iter()
        .flat_map(|c| c.params.iter().copied())
        .collect();
    for (t, f) in ctx.facts.iter() {
        if !f.visible
            || !t.requires_grad
            || f.reached()
            || f.grad_nonzero()
            || ctx.is_claimed(t.key)
            || cut.contains(&t.key)
        {
            continue;
        }
        let Some(m) = t.module.and_then(|m| ctx.capture.module(m)) else {
            continue;
        };
        if m.runs == 0 || m.runs_stateless < m.runs {
            continue;
        }
        let e = models.entry(m.root.unwrap_or(m.key)).or_default();
        e.0.push(t.key);
        e.1 |= !f.optimizers.is_empty();
    }
    let mut out = Vec::new();
    for (root, (keys, optimized)) in models {
        let model = ctx.capture.module(root);
        let what = model.map_or("the model".to_owned(), |m| {
            let name = if m.name.is_empty() { &m.class } else { &m.name };
            format!("`{name}`")
        });
        let called = model.and_then(|m| ctx.locate(m.first_call.as_ref()));
        let (params, are, them) = if keys.len() == 1 {
            ("1 of its parameters".to_owned(), "is", "it")
        } else {
            (format!("{} of its parameters", keys.len()), "are", "them")
        };
        let how = format!("{what} ran only through `functional_call` on tensors put in place of its own parameters");
        ctx.claim(keys.iter().copied());
        let finding = if optimized {
            // The rest of the model learning (a hypernetwork's weight swapped in, the
            // optimizer given all of `model.parameters()`): a dead entry, not a dead model.
            let rest_learns = ctx
                .facts
                .iter()
                .any(|(t, f)| f.learns() && model_of(ctx, t) == Some(root));
            CHECK
                .finding(
                    if rest_learns { Severity::Warning } else { Severity::Error },
                    format!("{how}: the optimizer steps {params}, which no forward uses, so no gradient ever reaches {them}."),
                )
                .fix("Hand `functional_call` the tensors the optimizer holds (`dict(model.named_parameters())`, or tensors computed from them without `.detach()`), or give the optimizer the tensors you pass in.")
        } else {
            CHECK.finding(
                Severity::Info,
                format!("{how}: {params} {are} a template, not what trains (the tensors passed in are)."),
            )
        };
        out.push(finding.params(names(ctx, &keys)).at(called));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::ModuleKind;

    /// A second model (key 5) that ran `runs` times, `stateless` of them on stand-ins, and
    /// whose one parameter (key 50) no gradient reached; `optimized`: the optimizer holds it.
    fn template(runs: u32, stateless: u32, optimized: bool) -> Scenario {
        let mut s = healthy(2);
        let m = s.module(5, "Sequential", "net", None, ModuleKind::Root, runs);
        m.runs_stateless = stateless;
        m.first_call = Some(gradsleuth_model::Location::new("train.py", 13));
        s.param(50, "net.weight", 5);
        if optimized {
            s.capture.optimizers[0].params.push(50);
        }
        s
    }

    #[test]
    fn a_template_no_optimizer_holds_is_info_at_the_call() {
        let s = template(2, 2, false);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].params, vec!["net.weight"]);
        assert!(f[0].message.contains("template"), "{}", f[0].message);
        assert_eq!(f[0].location.as_ref().map(|l| l.line), Some(13));
        // Nothing else reports it.
        assert!(s.quiet());
    }

    #[test]
    fn an_optimized_template_is_an_error() {
        let f = template(2, 2, true).run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Error);
        assert!(
            f[0].message.contains("the optimizer steps"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn one_weight_swapped_in_while_the_rest_learns_is_a_warning() {
        // A hypernetwork's output put in place of `fc.weight2`; `fc.weight`/`fc.bias` learn.
        let mut s = healthy(2);
        s.capture.modules[1].runs_stateless = 2;
        s.param(50, "fc.weight2", 2);
        s.capture.optimizers[0].params.push(50);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].params, vec!["fc.weight2"]);
        assert!(
            f[0].message.contains("1 of its parameters"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_model_that_also_ran_on_its_own_parameters_is_not_a_template() {
        assert!(template(2, 1, false).run(&CHECK).is_empty());
        assert!(template(2, 0, true).run(&CHECK).is_empty());
    }
}
