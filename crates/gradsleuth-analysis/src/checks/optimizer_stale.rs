//! GS107 `optimizer_stale`: the optimizer holds tensors the model no longer uses.

use gradsleuth_model::capture::TensorKind;
use gradsleuth_model::{Finding, Severity};

use super::{plural, trainable_params, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS107", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    // "No model uses it" needs a model seen running: a script that failed before its first
    // forward (or builds its optimizers before any model runs) says nothing about use.
    if ctx.capture.root_calls == 0 {
        return out;
    }
    for o in &ctx.capture.optimizers {
        // Unused needs evidence: this optimizer stepped while observed, and the tensor got no
        // gradient there and did not change. A layer trained through its own optimizer by
        // calling `self.forward()` directly (forward-forward training) is in no model the
        // tracer saw, yet its tensors get gradients and move; an optimizer that never stepped
        // in the window says nothing either way.
        if !ctx.capture.steps.iter().any(|s| s.optimizer == o.key) {
            continue;
        }
        let stale: Vec<u64> = o
            .params
            .iter()
            .copied()
            .filter(|k| {
                ctx.facts
                    .rec(*k)
                    .is_some_and(|t| t.kind == TensorKind::Foreign)
            })
            .filter(|k| {
                ctx.facts
                    .get(*k)
                    .is_some_and(|f| !f.reached() && !f.grad_nonzero() && !f.changed)
            })
            // An op used it and cut it off (`.detach()` of the script's own tensor): it is in
            // use, and the cut is why no gradient comes.
            .filter(|k| !ctx.capture.cuts.iter().any(|c| c.params.contains(k)))
            .collect();
        if stale.is_empty() {
            continue;
        }
        let stale_shapes: Vec<&Vec<i64>> = stale
            .iter()
            .filter_map(|k| ctx.facts.rec(*k))
            .map(|t| &t.shape)
            .collect();
        // Parameters of the model no optimizer holds, shaped like the stale ones: the replacements.
        let missing: Vec<u64> = trainable_params(ctx)
            .filter(|(t, f)| f.optimizers.is_empty() && !ctx.is_claimed(t.key))
            .filter(|(t, _)| {
                stale_shapes.iter().any(|s| **s == t.shape) || ctx.capture.optimizers.len() == 1
            })
            .map(|(t, _)| t.key)
            .collect();
        // A replacement module's other parameters come with it (a new layer with a bias the
        // old one lacked): no optimizer holds them either, for the same reason.
        let modules: Vec<u64> = missing
            .iter()
            .filter_map(|k| ctx.facts.rec(*k)?.module)
            .collect();
        let mut missing = missing;
        let more: Vec<u64> = trainable_params(ctx)
            .filter(|(t, f)| {
                f.optimizers.is_empty()
                    && !ctx.is_claimed(t.key)
                    && !missing.contains(&t.key)
                    && t.module.is_some_and(|m| modules.contains(&m))
            })
            .map(|(t, _)| t.key)
            .collect();
        missing.extend(more);
        let loc = ctx.locate(o.created_at.as_ref());
        if missing.is_empty() {
            out.push(
                CHECK.finding(Severity::Warning,
                    format!("`{}` holds {} that no model uses any more: stale references that only cost memory.", o.class, plural(stale.len(), "tensor")),
                )
                .at(loc)
                .fix("Build the optimizer after the model is final."),
            );
            continue;
        }
        ctx.claim(missing.iter().copied());
        let names = super::names(ctx, &missing);
        // Every tensor the optimizer holds is a module's that the script binds
        // (`model.0.weight`) and that never ran, while a module with the same layers did: a
        // copy trains instead (`ema = copy.deepcopy(model)` called in the loss). When part of
        // what it holds still runs, the module it was built for runs: a layer was replaced.
        let copied = (stale.len() == o.params.len())
            .then(|| copied_from(ctx, &stale, &names))
            .flatten();
        if let Some(owner) = copied {
            out.push(
                CHECK.finding(Severity::Error,
                    format!(
                        "`{}` was built from the parameters of `{owner}`, but `{owner}` never runs: the forward calls another module with the same layers (a copy of it), so the optimizer steps {} that get no gradient, while the {} that run and get gradients are never updated.",
                        o.class,
                        plural(stale.len(), "parameter"),
                        plural(names.len(), "parameter"),
                    ),
                )
                .params(names)
                .at(loc)
                .chain([
                    format!("optimizer built from `{owner}`"),
                    format!("forward runs a copy of `{owner}`: its own parameter objects"),
                    "optimizer.step() updates the parameters that never run ✗".into(),
                ])
                .fix(format!("Call `{owner}` in the training forward (keep the copy for evaluation or as an EMA/teacher), or build the optimizer from the module that runs.")),
            );
            continue;
        }
        // The cause is the replacement (class c): the line of the optimizer's file that
        // assigns the replaced layer's attribute; the optimizer's line is related.
        let replaced = loc.as_ref().and_then(|l| {
            missing
                .iter()
                .filter_map(|k| ctx.facts.rec(*k).and_then(|t| t.module))
                .filter_map(|m| ctx.capture.module(m))
                .find_map(|m| {
                    ctx.source
                        .borrow_mut()
                        .attribute_replacement(&l.file, &m.attr)
                })
        });
        // Built after the replacement, it was given parameters listed before it
        // (`params = list(model.parameters())`, then the replacement, then the optimizer).
        let listed_before =
            matches!((&replaced, &loc), (Some(r), Some(l)) if r.file == l.file && r.line < l.line);
        let (at, related) = match replaced {
            Some(r) => (
                Some(r),
                loc.clone().map(|l| {
                    (
                        l,
                        if listed_before {
                            "the optimizer, built after it from parameters listed before it: it holds the old parameters"
                        } else {
                            "the optimizer, built before it: it holds the old parameters"
                        },
                    )
                }),
            ),
            None => (loc.clone(), None),
        };
        let built = if listed_before {
            "was built from parameters listed before part of the model was replaced"
        } else {
            "was built before part of the model was replaced"
        };
        out.push(
            CHECK.finding(Severity::Error,
                format!(
                    "`{}` {built}: it still steps {} the model no longer uses, while the new {} are never updated.",
                    o.class,
                    plural(stale.len(), "old tensor"),
                    super::name_list(&names)
                ),
            )
            .params(names)
            .at(at)
            .related(related.as_ref().map(|r| r.0.clone()), related.map_or("", |r| r.1))
            .chain([
                "optimizer created with the old parameters".into(),
                "a layer replaced afterwards: new parameter objects".into(),
                "optimizer.step() updates the old ones ✗".into(),
            ])
            .fix("Create the optimizer after replacing layers (or call `optimizer.add_param_group({\"params\": new_layer.parameters()})`)."),
        );
    }
    out
}

/// The variable whose module's parameters the optimizer's stale tensors are (`model` for
/// `model.0.weight`, ...), when the parameters that run are that module's layers again
/// (`0.weight`, ...): a copy of it runs in its place.
fn copied_from(ctx: &Context, stale: &[u64], running: &[String]) -> Option<String> {
    let names: Vec<&str> = stale
        .iter()
        .filter_map(|k| ctx.facts.rec(*k))
        .map(|t| t.name.as_str())
        .collect();
    let owner = names.first()?.split('.').next()?;
    let rest: Vec<&str> = names
        .iter()
        .map(|n| n.strip_prefix(owner).and_then(|r| r.strip_prefix('.')))
        .collect::<Option<_>>()?;
    let same_layers = !running.is_empty()
        && rest.len() == running.len()
        && running.iter().all(|r| rest.contains(&r.as_str()));
    same_layers.then(|| owner.to_owned())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::ModuleKind;
    use gradsleuth_model::Location;

    /// The optimizer holds 30/31 (the old fc, on no model), the model's fc.* (10/11) are not
    /// held: `fc` was replaced after the optimizer was built.
    fn holding_the_old_fc() -> Scenario {
        let mut s = healthy(2);
        s.capture.optimizers[0].params = vec![30, 31];
        s.tensor(30, "<optimizer>", 1, TensorKind::Foreign);
        s.tensor(31, "<optimizer>", 1, TensorKind::Foreign);
        for st in &mut s.capture.steps {
            st.grad_norms.clear();
        }
        s
    }

    #[test]
    fn replaced_layer_is_named() {
        let s = holding_the_old_fc();
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].params, vec!["fc.weight", "fc.bias"]);
        assert_eq!(f[0].severity, Severity::Error);
    }

    #[test]
    fn a_replacement_layers_other_parameters_come_with_it() {
        // Two optimizers (no single one to own everything unheld); the old layer had no bias,
        // the new one has: the bias, shaped like nothing stale, is part of the replacement.
        let mut s = healthy(2);
        s.module(3, "Linear", "head", Some(1), ModuleKind::Registered, 2);
        s.param(40, "head.weight", 3);
        s.optimizer(101, &[40], Some(Location::new("train.py", 31)));
        s.capture.optimizers[0].params = vec![30];
        s.tensor(30, "<optimizer>", 1, TensorKind::Foreign);
        s.param(11, "fc.bias", 2).shape = vec![4];
        s.capture
            .tensors
            .retain(|t| !(t.key == 11 && t.shape == vec![4, 4]));
        for st in &mut s.capture.steps {
            st.grad_norms.clear();
        }
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].params, vec!["fc.weight", "fc.bias"]);
    }

    #[test]
    fn a_copy_that_runs_instead_of_the_optimized_module_is_named() {
        // `ema = copy.deepcopy(model)`, the optimizer built from `model`, the loss from `ema`.
        let mut s = healthy(2);
        s.capture.optimizers[0].params = vec![30, 31];
        s.tensor(30, "model.fc.weight", 1, TensorKind::Foreign);
        s.tensor(31, "model.fc.bias", 1, TensorKind::Foreign);
        for st in &mut s.capture.steps {
            st.grad_norms.clear();
        }
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message
                .contains("parameters of `model`, but `model` never runs"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].params, vec!["fc.weight", "fc.bias"]);
        // Layers that differ from the old ones: a replacement, told as before.
        s.tensor(31, "model.head.bias", 1, TensorKind::Foreign);
        let f = s.run(&CHECK);
        assert!(
            f[0].message
                .contains("was built before part of the model was replaced"),
            "{}",
            f[0].message
        );
        // The same layer names, but part of what the optimizer holds still runs (`model.fc`
        // replaced after `SGD(model.parameters())`): the module it was built for runs.
        s.tensor(31, "model.fc.bias", 1, TensorKind::Foreign);
        s.capture.optimizers[0].params.push(10);
        let f = s.run(&CHECK);
        assert!(
            f[0].message
                .contains("was built before part of the model was replaced"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn the_replacement_is_found_through_indices_before_or_after_the_optimizer() {
        // `model.blocks[1].fc = nn.Linear(...)` after the optimizer: the replacement is where
        // the finding points, the optimizer related.
        let mut s = holding_the_old_fc();
        let file = s.source(
            "model = Net()\nopt = SGD(model.parameters())\nmodel.blocks[1].fc = nn.Linear(4, 4)\n",
        );
        s.capture.optimizers[0].created_at = Some(Location::new(file.clone(), 2));
        let f = s.run(&CHECK);
        assert_eq!(f[0].location.as_ref().map(|l| l.line), Some(3), "{f:#?}");
        assert_eq!(f[0].related[0].location.line, 2);
        assert!(f[0]
            .message
            .contains("was built before part of the model was replaced"));
        // The optimizer built after the replacement from a list taken before it.
        let file = s.source(
            "params = list(model.parameters())\nmodel.blocks[1].fc = nn.Linear(4, 4)\nopt = SGD(params)\n",
        );
        s.capture.optimizers[0].created_at = Some(Location::new(file, 3));
        let f = s.run(&CHECK);
        assert_eq!(f[0].location.as_ref().map(|l| l.line), Some(2), "{f:#?}");
        assert!(
            f[0].message
                .contains("was built from parameters listed before part of the model was replaced"),
            "{}",
            f[0].message
        );
        assert!(f[0].related[0]
            .message
            .contains("built after it from parameters listed before it"));
    }

    #[test]
    fn tensors_that_get_gradients_and_move_are_used_whoever_calls_them() {
        // Forward-forward: a layer called through `self.forward()` with its own optimizer.
        let mut s = healthy(2);
        s.capture.optimizers[0].params = vec![30, 31];
        s.tensor(30, "<optimizer>", 1, TensorKind::Foreign);
        s.tensor(31, "<optimizer>", 1, TensorKind::Foreign);
        for st in &mut s.capture.steps {
            st.grad_norms = vec![(30, Some(0.5)), (31, Some(0.1))];
        }
        s.capture.weight_changes = vec![(30, true), (31, true)];
        assert!(s.run(&CHECK).is_empty());
    }

    #[test]
    fn a_tensor_an_op_cut_off_is_in_use_not_stale() {
        // The script's own stacked tensor, detached on its way into `vmap`: the cut is why it
        // gets no gradient, and it is the cut that is reported.
        let mut s = healthy(2);
        s.capture.optimizers[0].params.push(30);
        s.tensor(30, "params.0.weight", 1, TensorKind::Foreign);
        s.capture.cuts.push(gradsleuth_model::capture::CutRec {
            kind: gradsleuth_model::Category::Detach,
            op: "Tensor.detach".into(),
            params: vec![30],
            step: 1,
            ..Default::default()
        });
        assert!(s.run(&CHECK).is_empty());
        s.capture.cuts.clear();
        assert_eq!(s.run(&CHECK).len(), 1);
    }

    #[test]
    fn an_optimizer_that_never_stepped_in_the_window_holds_nothing_stale() {
        let mut s = healthy(2);
        s.capture.optimizers[0].params = vec![30, 31];
        s.tensor(30, "<optimizer>", 1, TensorKind::Foreign);
        s.tensor(31, "<optimizer>", 1, TensorKind::Foreign);
        s.capture.steps.clear();
        assert!(s.run(&CHECK).is_empty());
    }

    #[test]
    fn nothing_is_stale_before_any_model_ran() {
        let mut s = healthy(2);
        s.capture.optimizers[0].params = vec![30, 31];
        s.tensor(30, "<optimizer>", 1, TensorKind::Foreign);
        s.tensor(31, "<optimizer>", 1, TensorKind::Foreign);
        s.capture.root_calls = 0;
        assert!(s.run(&CHECK).is_empty());
    }

    #[test]
    fn optimizer_of_the_current_model_is_fine() {
        assert!(healthy(2).run(&CHECK).is_empty());
    }
}
