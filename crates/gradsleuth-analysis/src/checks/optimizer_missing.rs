//! GS106 `optimizer_missing`: trainable parameters no optimizer holds.

use gradsleuth_model::{Finding, Severity};

use super::{group_by_module, module_name, plural, trainable_params, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS106", run };

fn run(ctx: &Context) -> Vec<Finding> {
    if ctx.capture.optimizers.is_empty() {
        return Vec::new();
    }
    let missing: Vec<u64> = trainable_params(ctx)
        .filter(|(t, f)| {
            f.optimizers.is_empty() && !ctx.is_claimed(t.key) && (f.reached() || f.grad_nonzero())
        })
        .map(|(t, _)| t.key)
        .collect();
    let opt = &ctx.capture.optimizers[0];
    let mut out = Vec::new();
    for g in group_by_module(ctx, &missing) {
        let names = super::names(ctx, &g.keys);
        let what = match g.module.and_then(|m| ctx.capture.module(m)) {
            Some(m) => format!(
                "`{}` ({})",
                module_name(m),
                plural(names.len(), "parameter")
            ),
            None => super::name_list(&names),
        };
        ctx.claim(g.keys.iter().copied());
        let held = ctx
            .capture
            .optimizers
            .iter()
            .map(|o| o.params.len())
            .sum::<usize>();
        out.push(
            CHECK.finding(Severity::Error,
                format!("{what} {} gradients but no optimizer holds {}, so {} never updated.", if names.len() == 1 { "gets" } else { "get" }, if names.len() == 1 { "it" } else { "them" }, if names.len() == 1 { "it is" } else { "they are" }),
            )
            .params(names)
            .at(ctx.locate(opt.created_at.as_ref()))
            .chain([
                "gradient reaches .grad".into(),
                format!("the optimizer holds {} other tensors, not these ✗", held),
            ])
            .fix(format!("Build `{}` from `model.parameters()`, or add the group: `optimizer.add_param_group({{\"params\": <module>.parameters()}})`.", opt.class)),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::ModuleKind;

    #[test]
    fn a_submodule_left_out_is_named_as_a_module() {
        let mut s = healthy(2);
        s.module(3, "Linear", "head", Some(1), ModuleKind::Registered, 2);
        s.param(20, "head.weight", 3);
        s.param(21, "head.bias", 3);
        s.capture.backwards[0].reached.extend([20, 21]);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message.starts_with("`head` (2 parameters)"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].params, vec!["head.weight", "head.bias"]);
    }

    #[test]
    fn backward_only_scripts_have_no_optimizer_to_miss() {
        let mut s = healthy(2);
        s.capture.optimizers.clear();
        s.capture.steps.clear();
        assert!(s.run(&CHECK).is_empty());
    }
}
