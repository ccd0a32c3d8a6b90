//! Parameters starved by a stuck zero layer: not a check of its own, a consequence the checks
//! that explain a non-learning layer add to their finding.
//!
//! A layer whose weights are all zero (zero-initialised heads: torchvision's ViT, timm's
//! MLP-Mixer, LoRA's B) passes no gradient to anything before it until its first update.
//! When that layer never updates (no optimizer holds it, or it is frozen), every parameter
//! behind it gets an exactly zero gradient in every step: the same bug, not a second one. The
//! capture says which parameters were all zero at the end (`zero_valued`) and the op-level
//! graph which parameters lie behind the nodes the stuck layer made.

use std::collections::HashSet;

use gradsleuth_model::ParamStatus;

use crate::Context;

/// Parameters starved by stuck zero ones.
#[derive(Debug, Default)]
pub struct Starved {
    /// Those of the cause that are all zero and never change.
    pub stuck: Vec<u64>,
    /// Parameters behind them with an exactly zero gradient in every step.
    pub params: Vec<u64>,
}

/// Parameters whose gradient was exactly zero in every step because they sit behind one of
/// `cause` (keys the caller explains as not learning) that is all zero: not yet claimed,
/// not in `cause`, in capture order.
pub fn starved_by(ctx: &Context, cause: &[u64]) -> Starved {
    let stuck: Vec<u64> = cause
        .iter()
        .copied()
        .filter(|k| ctx.capture.zero_valued.contains(k))
        .filter(|k| ctx.facts.get(*k).is_some_and(|f| !f.learns()))
        .collect();
    let Some(graph) = ctx.capture.graph.as_ref() else {
        return Starved::default();
    };
    // Only a layer's multiplying weight starves what feeds it (a zero bias adds nothing, a
    // zero token concatenated to a sequence starves nothing), and only a layer without
    // sublayers is known to multiply its input by it: every node such a layer made is
    // behind that weight.
    let parents: HashSet<u64> = ctx
        .capture
        .modules
        .iter()
        .filter_map(|m| m.parent)
        .collect();
    let stuck: Vec<u64> = stuck
        .into_iter()
        .filter(|k| {
            ctx.facts.rec(*k).is_some_and(|t| {
                t.attr != "bias" && t.module.is_some_and(|m| !parents.contains(&m))
            })
        })
        .collect();
    let modules: HashSet<u64> = stuck
        .iter()
        .filter_map(|k| ctx.facts.rec(*k).and_then(|t| t.module))
        .collect();
    if modules.is_empty() {
        return Starved::default();
    }
    let inputs = super::graph_inputs(graph);
    let mut seen = vec![false; graph.nodes.len()];
    let mut stack: Vec<u32> = graph
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.module.is_some_and(|m| modules.contains(&m)))
        .map(|(i, _)| i as u32)
        .collect();
    let mut out = Vec::new();
    while let Some(i) = stack.pop() {
        let Some(s) = seen.get_mut(i as usize) else {
            continue;
        };
        if std::mem::replace(s, true) {
            continue;
        }
        if let Some(p) = graph.nodes[i as usize].param {
            let starved = ctx
                .facts
                .get(p)
                .is_some_and(|f| f.status == ParamStatus::GradZero);
            if starved && !cause.contains(&p) && !ctx.is_claimed(p) && !out.contains(&p) {
                out.push(p);
            }
        }
        stack.extend(inputs[i as usize].iter().copied());
    }
    let order = |k: &u64| ctx.capture.tensors.iter().position(|t| t.key == *k);
    out.sort_by_key(order);
    Starved { stuck, params: out }
}

impl Starved {
    /// Claims the starved parameters and gives the sentence a finding adds ("" when none
    /// starve).
    pub fn claim_and_describe(&self, ctx: &Context) -> String {
        if self.params.is_empty() {
            return String::new();
        }
        let stuck = super::names(ctx, &self.stuck);
        let starved = super::names(ctx, &self.params);
        ctx.claim(self.params.iter().copied());
        format!(
            " {} {} all zero (zero-initialised) and never {}, so {} behind {} {} an exactly zero gradient in every step and cannot learn either.",
            super::name_list(&stuck),
            if stuck.len() == 1 { "is" } else { "are" },
            if stuck.len() == 1 { "changes" } else { "change" },
            super::name_list(&starved),
            if stuck.len() == 1 { "it" } else { "them" },
            if starved.len() == 1 { "gets" } else { "get" },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{frozen, optimizer_missing};
    use gradsleuth_model::capture::{GraphNode, GraphRec, ModuleKind};
    use gradsleuth_model::{Location, Severity};

    /// `Net` = `body` (Linear) then `head` (Linear); the optimizer holds `body` only. The head
    /// gets gradients and never changes; `body` gets exactly zero gradients when the head's
    /// weight is all zero (`head_zero`), ordinary ones otherwise.
    fn head_left_out(head_zero: bool, frozen_head: bool) -> Scenario {
        let mut s = Scenario::new();
        s.module(1, "Net", "", None, ModuleKind::Root, 2);
        s.module(2, "Linear", "body", Some(1), ModuleKind::Registered, 2);
        s.module(3, "Linear", "head", Some(1), ModuleKind::Registered, 2);
        s.param(10, "body.weight", 2);
        s.param(11, "body.bias", 2);
        s.param(20, "head.weight", 3).requires_grad = !frozen_head;
        s.param(21, "head.bias", 3).requires_grad = !frozen_head;
        let held: &[u64] = if frozen_head {
            &[10, 11, 20, 21]
        } else {
            &[10, 11]
        };
        s.optimizer(100, held, Some(Location::new("train.py", 30)));
        s.capture.root_calls = 2;
        let body = if head_zero { 0.0 } else { 0.5 };
        for _ in 0..2 {
            let reached: &[u64] = if frozen_head {
                &[10, 11]
            } else {
                &[10, 11, 20, 21]
            };
            s.backward(reached, &[(20, Some(0.3)), (21, Some(0.3))]);
            let mut rows = vec![
                (10, Some(body), 1.0, 1.0 + body),
                (11, Some(body), 1.0, 1.0 + body),
            ];
            if frozen_head {
                rows.extend([(20, None, 0.0, 0.0), (21, None, 0.0, 0.0)]);
            }
            s.step(100, &rows);
        }
        if head_zero {
            s.capture.zero_valued = vec![20];
        }
        // loss <- Addmm(head) <- [AccumulateGrad(head.bias), Addmm(body), T <- AccumulateGrad(head.weight)]
        //                           Addmm(body) <- [AccumulateGrad(body.bias), T <- AccumulateGrad(body.weight)]
        let node = |name: &str, module: Option<u64>, param: Option<u64>| GraphNode {
            name: name.into(),
            module,
            param,
        };
        let mut nodes = vec![
            node("MseLossBackward0", Some(1), None),
            node("AddmmBackward0", Some(3), None),
            node("AddmmBackward0", Some(2), None),
            node("AccumulateGrad", None, Some(10)),
            node("AccumulateGrad", None, Some(11)),
        ];
        let mut edges = vec![(0, 1), (1, 2), (2, 3), (2, 4)];
        if !frozen_head {
            nodes.push(node("AccumulateGrad", None, Some(20)));
            nodes.push(node("AccumulateGrad", None, Some(21)));
            edges.extend([(1, 5), (1, 6)]);
        }
        s.capture.graph = Some(GraphRec {
            nodes,
            edges,
            truncated: false,
        });
        s
    }

    #[test]
    fn a_zero_head_left_out_of_the_optimizer_explains_the_zero_gradients_behind_it() {
        let f = head_left_out(true, false).run(&optimizer_missing::CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            f[0].params,
            vec!["head.weight", "head.bias", "body.weight", "body.bias"]
        );
        assert!(
            f[0].message.contains("`head.weight` is all zero"),
            "{}",
            f[0].message
        );
        // Nothing is left for the catch-all.
        let report = head_left_out(true, false).report();
        assert!(
            report.findings.iter().all(|f| f.code != "GS199"),
            "{:?}",
            report.findings
        );
    }

    #[test]
    fn a_head_with_weights_starves_nothing() {
        let f = head_left_out(false, false).run(&optimizer_missing::CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].params, vec!["head.weight", "head.bias"]);
        assert!(!f[0].message.contains("all zero"));
    }

    #[test]
    fn a_frozen_zero_head_is_told_with_the_layers_it_starves() {
        let f = head_left_out(true, true).run(&frozen::CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(
            f[0].params,
            vec!["head.weight", "head.bias", "body.weight", "body.bias"]
        );
    }

    #[test]
    fn a_zero_bias_starves_nothing() {
        let mut s = head_left_out(true, false);
        s.capture.zero_valued = vec![21];
        let f = s.run(&optimizer_missing::CHECK);
        assert_eq!(f[0].params, vec!["head.weight", "head.bias"]);
    }
}
