//! GS199 `unexplained`: the catch-all. Any parameter that does not learn and that no other
//! check explained is reported here, with what was observed, never silently dropped.

use gradsleuth_model::{Finding, ParamStatus, Severity};

use super::{group_by_module, module_name, plural, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS199", run };

/// Zero-gradient parameters of a module whose other parameters learn: the loss is invariant
/// to them (a bias that cancels in a difference or before a normalisation).
fn invariant(ctx: &Context, key: u64) -> bool {
    let Some(module) = ctx.facts.rec(key).and_then(|t| t.module) else {
        return false;
    };
    ctx.facts
        .iter()
        .any(|(t, f)| t.module == Some(module) && t.key != key && f.learns())
}

fn run(ctx: &Context) -> Vec<Finding> {
    // If every backward failed, "no gradient" is the failure's consequence, not a finding.
    if !ctx.capture.backwards.is_empty() && ctx.capture.backwards.iter().all(|b| b.error.is_some())
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut by_status: std::collections::BTreeMap<ParamStatus, Vec<u64>> = Default::default();
    let mut invariant_keys = Vec::new();
    // Tensors a `create_graph=True` derivative does not depend on, with that call.
    let mut constant: std::collections::BTreeMap<u64, &gradsleuth_model::capture::BackwardRec> =
        Default::default();
    for b in &ctx.capture.backwards {
        for k in &b.constant_in_derivative {
            constant.entry(*k).or_insert(b);
        }
    }
    let mut constant_keys = Vec::new();
    for (t, f) in ctx.facts.iter() {
        if !f.visible || ctx.is_claimed(t.key) {
            continue;
        }
        if f.status == ParamStatus::NotUpdated && f.step_not_reached {
            continue; // the script raised before its optimizer's step came
        }
        if f.status == ParamStatus::GradNone && constant.contains_key(&t.key) {
            constant_keys.push(t.key);
            continue;
        }
        // Numerically invariant whether or not a float32 step happened to flip a bit of it
        // (a bias before a BatchNorm: the same run says "not updated" or "learning" by chance,
        // and Adam's normalised step moves it on noise alone).
        // Negligible against its own weight, or rounding against its module's gradients (the
        // latter decides the cases where noise crosses the former's line from run to run).
        let negligible = || f.negligible_grad() || ctx.facts.rounding_grad(t.key);
        let tiny = f.status == ParamStatus::GradZero
            || (f.status == ParamStatus::NotUpdated && negligible())
            || (f.status == ParamStatus::Learning && f.grad_nonzero() && negligible());
        if tiny && invariant(ctx, t.key) {
            invariant_keys.push(t.key);
            continue;
        }
        if matches!(
            f.status,
            ParamStatus::GradNone
                | ParamStatus::GradZero
                | ParamStatus::NotUpdated
                | ParamStatus::Nan
        ) {
            by_status.entry(f.status).or_default().push(t.key);
        }
    }
    if let Some(call) = constant_keys.first().and_then(|k| constant.get(k)) {
        let names = super::names(ctx, &constant_keys);
        ctx.claim(constant_keys.iter().copied());
        let one = names.len() == 1;
        out.push(
            CHECK
                .finding(
                    Severity::Info,
                    format!(
                        "{} {} no gradient by design: the loss uses a derivative taken with `autograd.grad(..., create_graph=True)`, and that derivative does not depend on {} (an additive constant of the differentiated output, such as the last layer's bias under an energy whose forces are fitted).",
                        super::name_list(&names),
                        if one { "gets" } else { "get" },
                        if one { "it" } else { "them" }
                    ),
                )
                .params(names)
                .at(ctx.locate(call.location.as_ref()))
                .fix("Nothing to fix if only the derivative is fitted; add a term on the differentiated output itself (e.g. the energy) to the loss if these should learn."),
        );
    }
    if !invariant_keys.is_empty() {
        let names = super::names(ctx, &invariant_keys);
        ctx.claim(invariant_keys.iter().copied());
        out.push(
            CHECK.finding(Severity::Info,
                format!(
                    "{} {} a zero (or numerically negligible) gradient while the rest of {} module learns: the loss does not depend on {} (e.g. a bias that cancels in a difference or before a normalisation).",
                    super::name_list(&names),
                    if names.len() == 1 { "gets" } else { "get" },
                    if names.len() == 1 { "its" } else { "their" },
                    if names.len() == 1 { "it" } else { "them" }
                ),
            )
            .params(names)
            .fix("Usually harmless; drop the parameter (e.g. `bias=False`) if it is meant to do nothing."),
        );
    }
    for (status, keys) in by_status {
        for g in group_by_module(ctx, &keys) {
            let names = super::names(ctx, &g.keys);
            let m = g.module.and_then(|k| ctx.capture.module(k));
            let what = match m {
                Some(m) => format!(
                    "`{}` ({})",
                    module_name(m),
                    plural(names.len(), "parameter")
                ),
                None => super::name_list(&names),
            };
            let (message, fix, at) = describe(ctx, status, &what, m, &g.keys);
            ctx.claim(g.keys.iter().copied());
            let at = at.or_else(|| m.and_then(|m| m.forward_def.clone()));
            out.push(
                CHECK
                    .finding(Severity::Error, message)
                    .params(names)
                    .at(ctx.locate(at.as_ref()))
                    .fix(fix),
            );
        }
    }
    out
}

fn describe(
    ctx: &Context,
    status: ParamStatus,
    what: &str,
    m: Option<&gradsleuth_model::capture::ModuleRec>,
    keys: &[u64],
) -> (String, String, Option<gradsleuth_model::Location>) {
    let (message, fix, at) = match status {
        ParamStatus::GradNone => {
            let ran = m.map_or(0, |m| m.runs);
            let no_grad = m.is_some_and(|m| m.runs > 0 && m.runs_no_grad == m.runs);
            let msg = if no_grad {
                format!("{what} ran only with gradient recording disabled (inside `torch.no_grad()` / `inference_mode`), so no gradient reaches it.")
            } else if ran > 0 {
                format!("{what} ran in forward, but no gradient ever reached it: the path from it to the loss is cut after it runs.")
            } else {
                format!("{what} never received a gradient.")
            };
            (msg, "Look for `.detach()`, `.data`, `torch.no_grad()`, `torch.tensor(t)`/`.item()` round trips or non-differentiable ops between this module's output and the loss; the op-level capture of the first step found no cut it could name (a compiled region, or code it could not see): `gradsleuth run --deep` traces every observed step.".into(), None)
        }
        ParamStatus::GradZero => (
            format!("{what} receives a gradient, but it is exactly zero in every observed step."),
            "Look for zero-derivative ops between it and the loss (a saturated clamp, a mask that is all false, a multiplication by zero).".into(),
            None,
        ),
        ParamStatus::Nan => (
            format!("{what} has non-finite (inf/NaN) gradients."),
            "Find the first non-finite value in the forward (`gradsleuth run --watch`) and guard it (clamp the input of log/sqrt, add an epsilon to divisions).".into(),
            None,
        ),
        _ => {
            // Every optimizer holding each of them gives its group a learning rate of 0.
            let lr_zero = !keys.is_empty()
                && keys.iter().all(|k| {
                    let opts: Vec<_> = ctx
                        .facts
                        .get(*k)
                        .into_iter()
                        .flat_map(|f| f.optimizers.iter())
                        .filter_map(|o| ctx.capture.optimizer(*o))
                        .collect();
                    !opts.is_empty() && opts.iter().all(|o| o.lr_of(*k) == Some(0.0))
                });
            let all_groups = |o: &gradsleuth_model::capture::OptimizerRec| {
                !o.lrs.is_empty() && o.lrs.iter().all(|lr| *lr == 0.0)
            };
            let whole_optimizer = keys
                .iter()
                .filter_map(|k| ctx.facts.get(*k))
                .flat_map(|f| f.optimizers.iter())
                .filter_map(|o| ctx.capture.optimizer(*o))
                .any(all_groups);
            if lr_zero || whole_optimizer {
                let whose = if whole_optimizer {
                    "its optimizer's learning rate is 0"
                } else {
                    "the learning rate of its parameter group is 0 (`lr=0.0` in the group's dict, or a schedule that sets it)"
                };
                // Where the learning rates are set: the optimizer's creation.
                let at = keys
                    .iter()
                    .filter_map(|k| ctx.facts.get(*k))
                    .flat_map(|f| f.optimizers.iter())
                    .filter_map(|o| ctx.capture.optimizer(*o))
                    .find_map(|o| o.created_at.clone());
                (format!("{what} gets non-zero gradients but {whose}, so no step changes it."), "Set a non-zero learning rate for that group (check schedulers that start at 0 and warm up, and per-group `lr` values from a config).".into(), at)
            } else {
                (
                    format!("{what} gets non-zero gradients, but no optimizer step changed it."),
                    "Check that `optimizer.step()` runs after `backward()` and that the optimizer holds these exact tensors.".into(),
                    None,
                )
            }
        }
    };
    (message, fix, at)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    /// A run where `fc.bias` (key 11) never gets a gradient and never changes.
    fn bias_never_reached(constant_in_derivative: bool) -> Scenario {
        let mut s = healthy(2);
        for b in &mut s.capture.backwards {
            b.reached.retain(|k| *k != 11);
            if constant_in_derivative {
                b.constant_in_derivative = vec![11];
            }
        }
        for st in &mut s.capture.steps {
            st.grad_norms.retain(|(k, _)| *k != 11);
            for w in &mut st.weight_after {
                if w.0 == 11 {
                    w.1 = st.weight_before.iter().find(|b| b.0 == 11).unwrap().1;
                }
            }
        }
        s
    }

    #[test]
    fn unexplained_grad_none_is_reported_not_dropped() {
        let f = bias_never_reached(false).run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].params, vec!["fc.bias"]);
        assert!(f[0].message.contains("ran in forward"));
    }

    #[test]
    fn a_bias_the_fitted_derivative_does_not_depend_on_is_info() {
        let f = bias_never_reached(true).run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].params, vec!["fc.bias"]);
        assert!(
            f[0].message.contains("create_graph=True"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_cancelled_bias_is_info_not_an_error() {
        let mut s = healthy(2);
        for st in &mut s.capture.steps {
            for g in &mut st.grad_norms {
                if g.0 == 11 {
                    g.1 = Some(0.0);
                }
            }
            for w in &mut st.weight_after {
                if w.0 == 11 {
                    w.1 = st.weight_before.iter().find(|b| b.0 == 11).unwrap().1;
                }
            }
        }
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].params, vec!["fc.bias"]);
    }

    /// A bias before a BatchNorm: its gradient is float noise (1e-9 against a weight of norm
    /// 1), and whether a float32 step flips a bit of it is chance. Either way, the same line.
    #[test]
    fn a_numerically_cancelled_bias_is_the_same_info_whether_or_not_a_step_moved_it() {
        for moved in [false, true] {
            let mut s = healthy(2);
            for st in &mut s.capture.steps {
                for g in &mut st.grad_norms {
                    if g.0 == 11 {
                        g.1 = Some(1e-9);
                    }
                }
                let before = st.weight_before.iter().find(|b| b.0 == 11).unwrap().1;
                for w in &mut st.weight_after {
                    if w.0 == 11 {
                        w.1 = if moved { before + 1e-7 } else { before };
                    }
                }
            }
            let f = s.run(&CHECK);
            assert_eq!(f.len(), 1, "moved {moved}: {f:?}");
            assert_eq!(f[0].severity, Severity::Info);
            assert_eq!(f[0].params, vec!["fc.bias"]);
            assert!(f[0].message.contains("numerically negligible"));
        }
    }

    /// `fc.bias` moved by every step on a gradient of `bias` while `fc.weight`'s is 0.5.
    fn bias_with_gradient(bias: f64, dtype: &str) -> Scenario {
        let mut s = healthy(3);
        s.capture
            .tensors
            .iter_mut()
            .for_each(|t| t.dtype = dtype.into());
        for st in &mut s.capture.steps {
            for g in &mut st.grad_norms {
                if g.0 == 11 {
                    g.1 = Some(bias);
                }
            }
        }
        s
    }

    /// The same bias before a BatchNorm, run after run: its rounding noise is 1e-6 to 1e-5 of
    /// the weight's gradient, and against its own weight (of arbitrary size, here 1 to 3) it
    /// lands on either side of 1e-6. Judged against the gradients it is summed with, every run
    /// gives the same line; a gradient a thousand times above rounding still learns.
    #[test]
    fn a_cancelled_bias_is_judged_against_its_modules_gradients_not_its_weight() {
        for noise in [5e-7, 3e-6, 4e-6] {
            let f = bias_with_gradient(noise, "float32").run(&CHECK);
            assert_eq!(f.len(), 1, "noise {noise}: {f:?}");
            assert_eq!(f[0].severity, Severity::Info);
            assert_eq!(f[0].params, vec!["fc.bias"]);
        }
        assert!(bias_with_gradient(1e-3, "float32").run(&CHECK).is_empty());
        // float64 rounds a million million times finer: 4e-6 of the weight's gradient is real.
        assert!(bias_with_gradient(4e-6, "float64").run(&CHECK).is_empty());
        // Half precision: its epsilon says nothing here; only the weight-relative line applies.
        assert!(bias_with_gradient(4e-6, "bfloat16").run(&CHECK).is_empty());
    }

    #[test]
    fn learning_parameters_are_not_reported() {
        assert!(healthy(2).run(&CHECK).is_empty());
        assert!(healthy(2).report().findings.is_empty());
    }

    #[test]
    fn a_group_with_a_learning_rate_of_0_is_named() {
        // `fc.bias` in a second group with lr 0: it gets gradients, its weight never moves.
        let mut s = healthy(0);
        s.capture.optimizers[0].lrs = vec![1e-3, 0.0];
        s.capture.optimizers[0].group_sizes = vec![1, 1];
        for i in 0..3 {
            s.backward(&[10, 11], &[]);
            let w = 1.0 + f64::from(i);
            s.step(
                100,
                &[(10, Some(0.5), w, w + 0.1), (11, Some(0.2), 2.0, 2.0)],
            );
        }
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].params, vec!["fc.bias"]);
        assert!(
            f[0].message.contains("parameter group is 0"),
            "{}",
            f[0].message
        );
    }
}
