//! GS190 `fixed_model`: a model that is run but never trained here (a DQN target network, an
//! EMA teacher, a frozen reference). Said once as info so its parameters are not reported as
//! "not learning" by the checks after it.

use std::collections::{HashMap, HashSet};

use gradsleuth_model::{Finding, Severity};

use super::{model_of, plural, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS190", run };

/// Roots whose parameters are in no optimizer and reached by no backward.
pub fn fixed_models(ctx: &Context) -> HashSet<u64> {
    let mut stats: HashMap<u64, (bool, bool)> = HashMap::new();
    for (t, f) in ctx.facts.iter() {
        let Some(root) = model_of(ctx, t) else {
            continue;
        };
        let e = stats.entry(root).or_insert((true, true));
        e.0 &= f.optimizers.is_empty();
        e.1 &= !f.reached() && !f.grad_nonzero();
    }
    stats
        .into_iter()
        .filter(|(_, (no_opt, unreached))| *no_opt && *unreached)
        .map(|(k, _)| k)
        .collect()
}

fn run(ctx: &Context) -> Vec<Finding> {
    if !ctx.facts.any_optimizer_step {
        return Vec::new();
    }
    let mut out = Vec::new();
    for root in fixed_models(ctx) {
        let keys: Vec<u64> = ctx
            .facts
            .iter()
            .filter(|(t, f)| f.visible && t.requires_grad && model_of(ctx, t) == Some(root))
            .map(|(t, _)| t.key)
            .collect();
        if keys.is_empty() {
            continue;
        }
        let names = super::names(ctx, &keys);
        // With several models, parameter names start with the model's variable (`teacher.`):
        // that names it better than its class.
        let prefix = names
            .first()
            .and_then(|n| n.split_once('.'))
            .map(|(p, _)| p)
            .filter(|p| names.iter().all(|n| n.starts_with(&format!("{p}."))));
        let label = match (prefix, ctx.capture.module(root)) {
            (Some(p), _) => p.to_owned(),
            (None, Some(m)) => m.class.clone(),
            (None, None) => "model".to_owned(),
        };
        ctx.claim(keys.iter().copied());
        out.push(
            CHECK.finding(Severity::Info,
                format!("`{label}` ({}) is used as a fixed model: no optimizer holds it and no backward reaches it (a target network or a teacher).", plural(keys.len(), "parameter")),
            )
            .params(names),
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
    fn a_target_network_is_info() {
        let mut s = healthy(2);
        s.module(5, "Sequential", "", None, ModuleKind::Root, 2)
            .runs_no_grad = 2;
        s.module(6, "Linear", "0", Some(5), ModuleKind::Registered, 2);
        s.param(50, "target.0.weight", 6);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].message.starts_with("`target` (1 parameter)"),
            "{}",
            f[0].message
        );
        assert!(s.quiet());
    }

    #[test]
    fn the_trained_model_is_not_fixed() {
        assert!(healthy(2).run(&CHECK).is_empty());
    }
}
