//! GS101 `frozen`: parameters with `requires_grad=False`, deliberate or not.

use gradsleuth_model::{Finding, Severity};

use super::zero_behind::starved_by;
use super::{
    group_by_module, module_assignment, module_name, name_list, plural, trainable_params, Check,
};
use crate::Context;

pub const CHECK: Check = Check { code: "GS101", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let frozen: Vec<u64> = ctx
        .facts
        .iter()
        .filter(|(t, f)| {
            f.visible && !t.requires_grad && t.kind == gradsleuth_model::capture::TensorKind::Param
        })
        .map(|(t, _)| t.key)
        .collect();
    if frozen.is_empty() {
        return Vec::new();
    }
    let trainable = trainable_params(ctx).count();
    let any_optimizer = !ctx.capture.optimizers.is_empty();
    // Held by an optimizer (a warning) or not (deliberate), one finding each.
    let (held, free): (Vec<u64>, Vec<u64>) = frozen
        .iter()
        .partition(|k| ctx.facts.get(**k).is_some_and(|f| !f.optimizers.is_empty()));
    let mut out = Vec::new();
    for (keys, is_held) in [(held, true), (free, false)] {
        if keys.is_empty() {
            continue;
        }
        let groups = group_by_module(ctx, &keys);
        let modules: Vec<_> = groups
            .iter()
            .filter_map(|g| g.module.and_then(|m| ctx.capture.module(m)))
            .collect();
        let names = super::names(ctx, &keys);
        let what = if modules.len() == groups.len() && !modules.is_empty() {
            let shown: Vec<String> = modules
                .iter()
                .take(4)
                .map(|m| format!("`{}`", module_name(m)))
                .collect();
            let more = if modules.len() > 4 {
                format!(" and {} more modules", modules.len() - 4)
            } else {
                String::new()
            };
            format!(
                "{}{more} ({})",
                shown.join(", "),
                plural(names.len(), "parameter")
            )
        } else {
            name_list(&names)
        };
        let are = if names.len() == 1 { "is" } else { "are" };
        let loc = modules.first().and_then(|m| module_assignment(ctx, m));
        // The line that froze them, when the run saw it: where the fix belongs.
        let froze = freeze_site(ctx, &keys);
        let starved = starved_by(ctx, &keys);
        ctx.claim(keys.iter().copied());
        let also = starved.claim_and_describe(ctx);
        let mut names = names;
        names.extend(super::names(ctx, &starved.params));
        let finding = if is_held {
            let opt = ctx
                .facts
                .get(keys[0])
                .and_then(|f| f.optimizers.first().copied())
                .and_then(|o| ctx.capture.optimizer(o));
            let opt_loc = opt.and_then(|o| ctx.locate(o.created_at.as_ref()));
            let (at, related) = match froze.clone() {
                Some(f) => (
                    Some(f),
                    vec![
                        (opt_loc, "the optimizer that still holds them"),
                        (loc, "the first frozen module"),
                    ],
                ),
                None => (
                    opt_loc.or(loc.clone()),
                    vec![(loc, "the first frozen module")],
                ),
            };
            let mut f = CHECK.finding(Severity::Warning,
                format!("{what} {are} frozen (requires_grad=False) but the optimizer still holds them: it will never update them.{also}"),
            )
            .at(at);
            for (l, m) in related {
                f = f.related(l, m);
            }
            f
            .fix("If they should train, unfreeze them (`p.requires_grad_(True)`) before building the optimizer; if the freeze is intended, build the optimizer from `[p for p in model.parameters() if p.requires_grad]`.")
        } else if trainable == 0 {
            CHECK.finding(if any_optimizer || !ctx.capture.backwards.is_empty() { Severity::Error } else { Severity::Warning },
                format!("Every parameter is frozen ({what}): nothing in the model can learn."),
            )
            .at(froze.clone().or(loc.clone()))
            .related(if froze.is_some() { loc.clone() } else { None }, "the first frozen module")
            .fix("Unfreeze the parameters that should train: `for p in model.head.parameters(): p.requires_grad_(True)`.")
        } else if !also.is_empty() {
            // Deliberate or not, the freeze stops other layers learning.
            CHECK
                .finding(
                    Severity::Warning,
                    format!("{what} {are} frozen and left out of the optimizer.{also}"),
                )
                .at(froze.or(loc))
                .fix("Unfreeze the zero-initialised layer (or initialise it with non-zero weights) if the layers before it should train.")
        } else {
            CHECK
                .finding(
                    Severity::Info,
                    match trained_summary(ctx).filter(|_| modules.len() > 4) {
                        // A large frozen base (a backbone, a model with adapters): what
                        // trains says more than the list of what does not.
                        Some(trains) => format!(
                            "{what} {are} frozen and left out of the optimizer (deliberate freezing); what trains: {trains}."
                        ),
                        None => format!(
                            "{what} {are} frozen and left out of the optimizer (deliberate freezing)."
                        ),
                    },
                )
                .at(froze.or(loc))
        };
        out.push(finding.params(names));
    }
    out
}

/// The trainable parameters in a few words: their modules' names with layer indices folded
/// (`vit.layers.*.attention.q_proj.lora_A.default`), at most 4, and how many parameters.
fn trained_summary(ctx: &Context) -> Option<String> {
    let mut patterns: Vec<String> = Vec::new();
    let mut count = 0;
    for (t, _) in trainable_params(ctx) {
        count += 1;
        let module = t.name.rsplit_once('.').map_or("", |(m, _)| m);
        let folded: Vec<&str> = module
            .split('.')
            .map(|part| {
                if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
                    "*"
                } else {
                    part
                }
            })
            .collect();
        let p = if module.is_empty() {
            t.name.clone()
        } else {
            folded.join(".")
        };
        if !patterns.contains(&p) {
            patterns.push(p);
        }
    }
    if count == 0 {
        return None;
    }
    let shown: Vec<String> = patterns.iter().take(4).map(|p| format!("`{p}`")).collect();
    let more = match patterns.len() {
        n if n > 4 => format!(" and {} more", n - 4),
        _ => String::new(),
    };
    Some(format!(
        "{}{more} ({})",
        shown.join(", "),
        plural(count, "parameter")
    ))
}

/// The line that froze most of `keys` (where `requires_grad` was set to False), if seen.
fn freeze_site(ctx: &Context, keys: &[u64]) -> Option<gradsleuth_model::Location> {
    let mut counts: Vec<(&gradsleuth_model::Location, usize)> = Vec::new();
    for k in keys {
        if let Some(l) = ctx.facts.rec(*k).and_then(|t| t.frozen_at.as_ref()) {
            match counts
                .iter_mut()
                .find(|(c, _)| c.file == l.file && c.line == l.line)
            {
                Some((_, n)) => *n += 1,
                None => counts.push((l, 1)),
            }
        }
    }
    let best = counts.iter().max_by_key(|(_, n)| *n).map(|(l, _)| *l)?;
    ctx.locate(Some(best))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::ModuleKind;

    fn with_backbone(in_optimizer: bool) -> Scenario {
        let mut s = healthy(2);
        s.module(3, "Conv2d", "backbone", Some(1), ModuleKind::Registered, 2);
        s.param(20, "backbone.weight", 3).requires_grad = false;
        s.param(21, "backbone.bias", 3).requires_grad = false;
        if in_optimizer {
            s.capture.optimizers[0].params.extend([20, 21]);
        }
        s
    }

    #[test]
    fn deliberate_freezing_is_info_grouped_by_module() {
        let f = with_backbone(false).run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].message.contains("`backbone` (2 parameters)"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_large_frozen_base_says_what_trains() {
        // Six frozen blocks, adapters in two of them and the healthy model's layers train.
        let mut s = healthy(2);
        for i in 0..6u64 {
            s.module(
                30 + i,
                "Linear",
                &format!("blocks.{i}.proj"),
                Some(1),
                ModuleKind::Registered,
                2,
            );
            s.param(40 + i, &format!("blocks.{i}.proj.weight"), 30 + i)
                .requires_grad = false;
        }
        for i in 0..2u64 {
            s.module(
                50 + i,
                "Linear",
                &format!("blocks.{i}.adapter"),
                Some(1),
                ModuleKind::Registered,
                2,
            );
            s.param(60 + i, &format!("blocks.{i}.adapter.weight"), 50 + i);
        }
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].message.contains("and 2 more modules (6 parameters)"),
            "{}",
            f[0].message
        );
        assert!(f[0].message.contains("what trains: "), "{}", f[0].message);
        // Layer indices folded: one pattern for both adapters.
        assert_eq!(
            f[0].message.matches("`blocks.*.adapter`").count(),
            1,
            "{}",
            f[0].message
        );
        // A small frozen set keeps the short form.
        assert!(!with_backbone(false).run(&CHECK)[0]
            .message
            .contains("what trains"));
    }

    #[test]
    fn frozen_but_optimized_is_a_warning() {
        let f = with_backbone(true).run(&CHECK);
        assert_eq!(f[0].severity, Severity::Warning);
    }

    #[test]
    fn nothing_frozen_nothing_said() {
        assert!(healthy(2).run(&CHECK).is_empty());
    }
}
