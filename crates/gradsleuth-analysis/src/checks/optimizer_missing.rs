//! GS106 `optimizer_missing`: trainable parameters no optimizer holds.

use gradsleuth_model::{Finding, Severity};

use super::zero_behind::starved_by;
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
    if missing.is_empty() {
        return Vec::new();
    }
    let opt = &ctx.capture.optimizers[0];
    let held = ctx
        .capture
        .optimizers
        .iter()
        .map(|o| o.params.len())
        .sum::<usize>();
    let groups = group_by_module(ctx, &missing);
    // One cause, one finding: a filter that chose an optimizer's parameters (a weight-decay
    // split that forgot its second group, a name filter) drops every module it misses at once.
    let filter = ctx.capture.optimizers.iter().find_map(|o| {
        let at = o.created_at.as_ref()?;
        let line = ctx
            .source
            .borrow_mut()
            .parameter_filter(&at.file, at.line)?;
        let loc = ctx.source.borrow_mut().location(&at.file, line);
        Some((o, loc))
    });
    if let Some((o, at)) = filter {
        let starved = starved_by(ctx, &missing);
        let mut names = super::names(ctx, &missing);
        ctx.claim(missing.iter().copied());
        let also = starved.claim_and_describe(ctx);
        names.extend(super::names(ctx, &starved.params));
        let modules: Vec<String> = groups
            .iter()
            .filter_map(|g| g.module.and_then(|m| ctx.capture.module(m)))
            .map(|m| format!("`{}`", module_name(m)))
            .collect();
        let within = match modules.len() {
            0 => String::new(),
            1..=4 => format!(" of {}", modules.join(", ")),
            n => format!(" of {n} modules ({}, …)", modules[..3].join(", ")),
        };
        let (gets, it, it_is) = agreement(missing.len());
        return vec![CHECK
            .finding(
                Severity::Error,
                format!(
                    "{}{within} {gets} gradients but no optimizer holds {it}: the filter that chose `{}`'s parameters leaves {it} out, so {it_is} never updated.{also}",
                    plural(missing.len(), "parameter"),
                    o.class,
                ),
            )
            .params(names)
            .at(Some(at))
            .related(
                ctx.locate(o.created_at.as_ref()),
                "the optimizer, built from the filtered parameters",
            )
            .chain([
                "gradient reaches .grad".into(),
                "the parameter filter excludes them ✗".into(),
                format!("the optimizer holds {held} other tensors, not these"),
            ])
            .fix("Widen the filter, or give the parameters it leaves out a group of their own, e.g. `{\"params\": excluded, \"weight_decay\": 0.0}` in a weight-decay split.")];
    }
    let (opt_var, root) = ctx
        .locate(opt.created_at.as_ref())
        .and_then(|l| l.snippet)
        .map(|s| {
            names_in_creation(&s, |path| {
                ctx.capture.modules.iter().any(|m| m.name == path)
            })
        })
        .unwrap_or_else(|| ("optimizer".into(), "model".into()));
    let mut out = Vec::new();
    for g in groups {
        let starved = starved_by(ctx, &g.keys);
        let mut names = super::names(ctx, &g.keys);
        let module = g.module.and_then(|m| ctx.capture.module(m));
        let what = match module {
            Some(m) => format!(
                "`{}` ({})",
                module_name(m),
                plural(names.len(), "parameter")
            ),
            None => super::name_list(&names),
        };
        let params = match module {
            Some(m) if !m.name.is_empty() => format!("{root}.{}.parameters()", m.name),
            _ => format!(
                "[{}]",
                names
                    .iter()
                    .map(|n| format!("{root}.{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        ctx.claim(g.keys.iter().copied());
        let (gets, it, it_is) = agreement(names.len());
        let also = starved.claim_and_describe(ctx);
        names.extend(super::names(ctx, &starved.params));
        out.push(
            CHECK.finding(Severity::Error,
                format!("{what} {gets} gradients but no optimizer holds {it}, so {it_is} never updated.{also}"),
            )
            .params(names)
            .at(ctx.locate(opt.created_at.as_ref()))
            .chain([
                "gradient reaches .grad".into(),
                format!("the optimizer holds {} other tensors, not these ✗", held),
            ])
            .fix(format!("Build `{}` from `{root}.parameters()`, or add the group: `{opt_var}.add_param_group({{\"params\": {params}}})`.", opt.class)),
        );
    }
    out
}

/// The verb and pronouns agreeing with `n` parameters: ("gets", "it", "it is") or the plural.
fn agreement(n: usize) -> (&'static str, &'static str, &'static str) {
    if n == 1 {
        ("gets", "it", "it is")
    } else {
        ("get", "them", "they are")
    }
}

/// From the optimizer's line (`opt = torch.optim.Adam(net.parameters(), ...)`): the variable
/// it is assigned to and the model variable its parameters come from, for a fix a user can
/// paste (`optimizer` and `model` when the line does not say).
fn names_in_creation(line: &str, is_module: impl Fn(&str) -> bool) -> (String, String) {
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
            && !s.starts_with(|c: char| c.is_ascii_digit() || c == '.')
    };
    let opt_var = line
        .split_once('=')
        .map(|(l, _)| l.trim())
        .filter(|l| is_name(l))
        .unwrap_or("optimizer")
        .to_owned();
    // The expression before `.parameters()`: the model itself (`net`) or one of its layers
    // (`self.encoder`, `model.backbone.layer1`); the model is what is left once the longest
    // tail that names a layer of the model is taken off.
    let root = line
        .find("parameters()")
        .map(|i| {
            let before = line[..i].trim_end_matches("named_").trim_end_matches('.');
            let start = before
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                .map_or(0, |j| j + 1);
            let parts: Vec<&str> = before[start..].split('.').collect();
            let cut = (1..parts.len())
                .find(|&k| is_module(&parts[k..].join(".")))
                .unwrap_or(parts.len());
            parts[..cut].join(".")
        })
        .filter(|r| is_name(r))
        .unwrap_or_else(|| "model".into());
    (opt_var, root)
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
    fn the_fix_names_the_scripts_own_variables() {
        let layers = |p: &str| ["encoder", "backbone", "backbone.layer1"].contains(&p);
        assert_eq!(
            names_in_creation(
                "    opt = torch.optim.Adam(net.parameters(), lr=lr)",
                layers
            ),
            ("opt".into(), "net".into())
        );
        assert_eq!(
            names_in_creation("    return torch.optim.SGD(groups, lr=base_lr)", layers),
            ("optimizer".into(), "model".into())
        );
        assert_eq!(
            names_in_creation(
                "self.opt = AdamW(self.model.encoder.named_parameters())",
                layers
            ),
            ("self.opt".into(), "self.model".into())
        );
        // A LightningModule's `configure_optimizers`: the model is `self`.
        assert_eq!(
            names_in_creation(
                "        return torch.optim.Adam(self.encoder.parameters(), lr=1e-3)",
                layers
            ),
            ("optimizer".into(), "self".into())
        );
        assert_eq!(
            names_in_creation("opt = SGD(model.backbone.layer1.parameters())", layers),
            ("opt".into(), "model".into())
        );
    }

    #[test]
    fn backward_only_scripts_have_no_optimizer_to_miss() {
        let mut s = healthy(2);
        s.capture.optimizers.clear();
        s.capture.steps.clear();
        assert!(s.run(&CHECK).is_empty());
    }
}
