//! GS201–GS207: the op-level cuts. During the first observed iteration every torch call is
//! recorded; where a parameter's influence stops reaching the loss, the op and its line are
//! known. Each category is its own check (code, doc, message, fix); they share one runner.

use std::collections::BTreeMap;

use gradsleuth_model::{Category, Finding, Severity};

use super::{group_by_module, module_name, name_list, plural, Check};
use crate::Context;

/// Per-category text.
struct Kind {
    kind: &'static str,
    code: &'static str,
    category: Category,
    /// What happened, given the op and what was cut off.
    what: fn(&str, &str) -> String,
    fix: &'static str,
}

const KINDS: &[Kind] = &[
    Kind {
        kind: "detach",
        code: "GS201",
        category: Category::Detach,
        what: |op, who| format!("`{op}` cuts {who} off the loss: no gradient flows back through it."),
        fix: "Remove the `.detach()` on this path (keep it only where you mean to stop gradients, e.g. targets); if you need a copy, use `.clone()`.",
    },
    Kind {
        kind: "data_attr",
        code: "GS202",
        category: Category::DataAttr,
        what: |_, who| format!("`.data` hands the loss a tensor outside autograd, so {who} never gets a gradient."),
        fix: "Use the tensor itself instead of `.data` (and `.detach()` only where gradients must stop); `.data` also hides in-place changes from autograd's checks.",
    },
    Kind {
        kind: "no_grad",
        code: "GS203",
        category: Category::NoGrad,
        what: |_, who| format!("{who} ran with gradient recording disabled (`torch.no_grad()`/`inference_mode`), so its output has no history and it never gets a gradient."),
        fix: "Take this computation out of the `no_grad` block (keep `no_grad` for evaluation and target computations only).",
    },
    Kind {
        kind: "rewrap",
        code: "GS204",
        category: Category::Rewrap,
        what: |op, who| format!("`{op}(t)` copies a tensor into a new one without history, so {who} never gets a gradient."),
        fix: "Use the tensor itself (or `t.clone()`, `t.to(dtype)`, `torch.stack`/`torch.cat` of tensors) instead of `torch.tensor(t)`/`torch.as_tensor(t)`.",
    },
    Kind {
        kind: "numpy_roundtrip",
        code: "GS205",
        category: Category::NumpyRoundtrip,
        what: |op, who| format!("`{op}` turns the value into Python numbers; when it comes back as a tensor it has no history, so {who} never gets a gradient."),
        fix: "Keep the computation in torch ops (e.g. `torch.stack(values)` rather than `torch.tensor([v.item() for v in values])`, torch functions rather than numpy).",
    },
    Kind {
        kind: "loss_rewrap",
        code: "GS206",
        category: Category::LossRewrap,
        what: |_, who| format!("The loss is re-created as a new leaf tensor (`requires_grad=True` on a copy): backward runs without error but stops at it, so {who} never learns."),
        fix: "Call `backward()` on the loss tensor itself; never rebuild it with `torch.tensor(loss.item(), requires_grad=True)` or set `requires_grad` on a detached copy.",
    },
    Kind {
        kind: "non_differentiable",
        code: "GS207",
        category: Category::NonDifferentiable,
        what: |op, who| format!("`{op}` is not differentiable (its output is an index, a boolean or piecewise constant), so {who} gets no gradient through it."),
        fix: "Use a differentiable surrogate: softmax/log-softmax instead of argmax, a straight-through estimator (`x + (x.round() - x).detach()`) for rounding, a soft mask (`torch.sigmoid(k * (x - t))`) instead of a comparison.",
    },
    Kind {
        kind: "dead_path",
        code: "GS210",
        category: Category::DeadPath,
        what: |op, who| format!("`{op}` passes no gradient here (saturated everywhere, or its mask selects nothing), so {who} gets an exactly zero gradient."),
        fix: "Check the bounds and the mask: normalise the input so the clamp is not saturated, make sure the mask selects something, or use a soft version (`torch.tanh`, a sigmoid mask).",
    },
    Kind {
        kind: "grad_clip",
        code: "GS211",
        category: Category::GradClip,
        what: |op, who| format!("`{op}` clips with a bound of 0, which sets every gradient to zero: {who} never changes."),
        fix: "Use a positive bound (`max_norm=1.0` is a common default); a bound from a config or schedule may be 0 by mistake.",
    },
    Kind {
        kind: "grad_hook",
        code: "GS212",
        category: Category::GradHook,
        what: |_, who| format!("A gradient hook returns zeros, so {who} gets an exactly zero gradient."),
        fix: "Return the gradient (or a rescaled one) from the hook, or `None` to leave it unchanged; to freeze, use `requires_grad_(False)`.",
    },
    Kind {
        kind: "create_graph",
        code: "GS213",
        category: Category::CreateGraph,
        what: |_, who| {
            if who == "the model" {
                "`torch.autograd.grad` without `create_graph=True` feeds the loss: that term is a constant and adds nothing to the gradient (a gradient penalty that does nothing).".to_owned()
            } else {
                format!("`torch.autograd.grad` without `create_graph=True` feeds the loss: that term is a constant, so {who} gets no gradient from it.")
            }
        },
        fix: "Pass `create_graph=True` to `torch.autograd.grad` when its result is part of a loss (gradient penalties, physics-informed residuals); leave it off only for first-order approximations by design.",
    },
    Kind {
        kind: "stale_tensor",
        code: "GS214",
        category: Category::StaleTensor,
        what: |_, _| "The loss uses a graph built in an earlier step, whose buffers the first backward already freed (\"Trying to backward through the graph a second time\").".to_owned(),
        fix: "Recompute the tensor inside the training step (move it into the loop), or accumulate plain numbers (`total += loss.item()`); do not add `retain_graph=True` to silence it, that trains on stale values.",
    },
];

macro_rules! cut_check {
    ($name:ident, $idx:expr, $code:expr, $cat:expr, $title:expr, $doc:expr) => {
        pub mod $name {
            use super::*;
            pub const CHECK: Check = Check {
                code: $code,
                name: $title,
                category: $cat,
                doc: $doc,
                run,
            };
            fn run(ctx: &Context) -> Vec<Finding> {
                run_kind(ctx, &KINDS[$idx])
            }
        }
    };
}

cut_check!(detach, 0, "GS201", Category::Detach, "detach",
    "A `.detach()` between a parameter and the loss: everything before it gets no gradient. Legitimate for targets (bootstrapped values, EMA teachers, stop-gradient by design), a bug when the detached value is the model's own prediction path.");
cut_check!(data_attr, 1, "GS202", Category::DataAttr,
    "data-attribute", "`tensor.data` returns the same storage without autograd history. Used on the path to the loss it silently cuts the graph (and hides in-place changes from autograd's version checks).");
cut_check!(no_grad, 2, "GS203", Category::NoGrad, "no-grad",
    "Ops run under `torch.no_grad()`, `torch.inference_mode()`, `torch.set_grad_enabled(False)` or a `@torch.no_grad()` function record no history. A model part run there (to save memory, or copied from evaluation code) never gets a gradient. The finding names the op and, as related, the line that disabled grad.");
cut_check!(rewrap, 3, "GS204", Category::Rewrap, "rewrap",
    "`torch.tensor(t)`, `torch.as_tensor(t)` and `t.new_tensor(...)` copy data into a new leaf without history (PyTorch warns for `torch.tensor(t)` but the warning is easy to miss). Anything upstream of the copy gets no gradient.");
cut_check!(numpy_roundtrip, 4, "GS205", Category::NumpyRoundtrip, "numpy-roundtrip",
    "`.item()`, `.tolist()`, `.numpy()` leave autograd as Python numbers or arrays; a value that comes back through `torch.tensor(...)`/`torch.from_numpy(...)` is a constant. gradsleuth links the exit and the return so the whole round trip is shown.");
cut_check!(loss_rewrap, 5, "GS206", Category::LossRewrap, "loss-rewrap",
    "`loss = torch.tensor(loss.item(), requires_grad=True)` (often added to silence \"element 0 of tensors does not require grad\") makes the loss a new leaf: `backward()` succeeds and computes nothing for the model.");
cut_check!(dead_path, 7, "GS210", Category::DeadPath, "dead-path",
    "An op on the path whose local gradient is zero for the observed inputs: a clamp/hardtanh saturated everywhere, a `where`/`masked_fill` whose mask selects nothing. The parameter gets a gradient of exactly zero. gradsleuth names it when the first step's gradients were exactly zero.");
cut_check!(grad_clip, 8, "GS211", Category::GradClip, "grad-clip",
    "`clip_grad_norm_(params, 0)` or `clip_grad_value_(params, 0)` zeroes every gradient before the step; a bound read from a config or a schedule that reaches 0 does the same silently.");
cut_check!(grad_hook, 9, "GS212", Category::GradHook, "grad-hook",
    "A hook registered with `register_hook` that returns zeros (`lambda g: g * 0`, `torch.zeros_like(g)`) replaces the gradient with zero for everything upstream; gradsleuth watches hooks on parameters and on tensors of the traced step.");
cut_check!(create_graph, 10, "GS213", Category::CreateGraph, "create-graph",
    "`torch.autograd.grad(...)` returns gradients without history unless `create_graph=True`; used in a loss (gradient penalty, PINN residual, meta-learning) that term is a constant and contributes nothing. Legitimate only for deliberate first-order approximations.");
cut_check!(stale_tensor, 11, "GS214", Category::StaleTensor, "stale-tensor",
    "A tensor computed once (before the loop, or carried over from the previous step, e.g. `running_loss += loss`) and reused in a later step's loss: the first backward freed its graph, so the second raises \"Trying to backward through the graph a second time\".");
cut_check!(non_differentiable, 6, "GS207", Category::NonDifferentiable, "non-differentiable",
    "argmax/argmin, round/floor/ceil/sign, comparisons and integer or bool casts have no useful gradient. A loss that reaches the model only through them leaves the model without gradient.");

/// Kinds that explain exactly-zero gradients (the parameter is reached, with zeros).
fn zero_kind(kind: &str) -> bool {
    matches!(
        kind,
        "non_differentiable" | "dead_path" | "grad_clip" | "grad_hook"
    )
}

/// Where the fix belongs (for merging): for `no_grad`, the line that disabled grad as the
/// tracer saw it; else the op's line.
fn fix_site(cut: &gradsleuth_model::capture::CutRec) -> Option<(String, u32)> {
    let loc = match (cut.kind.as_str(), cut.related.first()) {
        ("no_grad", Some(r)) => Some(&r.location),
        _ => cut.location.as_ref(),
    };
    loc.map(|l| (l.file.clone(), l.line))
}

/// Cuts sharing a fix site: the site, the first cut, every parameter named.
type Merged<'a> = (
    Option<(String, u32)>,
    &'a gradsleuth_model::capture::CutRec,
    Vec<u64>,
);

fn run_kind(ctx: &Context, kind: &Kind) -> Vec<Finding> {
    let mut out = Vec::new();
    // Cuts sharing the line to fix (ops inside one `no_grad` block) make one finding.
    let mut merged: Vec<Merged<'_>> = Vec::new();
    for cut in ctx.capture.cuts.iter().filter(|c| c.kind == kind.kind) {
        let site = fix_site(cut);
        match merged
            .iter_mut()
            .find(|(s, _, _)| site.is_some() && *s == site)
        {
            Some((_, _, params)) => params.extend(cut.params.iter().copied()),
            None => merged.push((site, cut, cut.params.clone())),
        }
    }
    for (_, cut, params) in merged {
        // Only parameters that never learned (not claimed by a more specific check).
        let mut keys: Vec<u64> = params
            .iter()
            .copied()
            .filter(|k| !ctx.is_claimed_before_cuts(*k))
            .filter(|k| {
                ctx.facts.get(*k).is_some_and(|f| {
                    let never = !f.learns()
                        && (!f.reached() || (zero_kind(&cut.kind) && !f.grad_nonzero()));
                    // Cut in a later step: it learned before, then lost its gradient.
                    let later = cut.step > 1
                        && f.grad_norms
                            .get(cut.step as usize - 1)
                            .is_some_and(Option::is_none);
                    f.visible && (never || later)
                })
            })
            .collect();
        keys.dedup();
        let standalone = matches!(kind.kind, "loss_rewrap" | "create_graph" | "stale_tensor");
        if keys.is_empty() && !standalone {
            continue;
        }
        let mut ordered: BTreeMap<usize, u64> = BTreeMap::new();
        for k in &keys {
            if let Some(pos) = ctx.capture.tensors.iter().position(|t| t.key == *k) {
                ordered.insert(pos, *k);
            }
        }
        let keys: Vec<u64> = ordered.into_values().collect();
        let names = super::names(ctx, &keys);
        let groups = group_by_module(ctx, &keys);
        let modules: Vec<_> = groups
            .iter()
            .filter_map(|g| g.module.and_then(|m| ctx.capture.module(m)))
            .collect();
        let who = if keys.is_empty() {
            "the model".to_owned()
        } else if modules.len() == groups.len() && !modules.is_empty() && modules.len() <= 3 {
            let m: Vec<String> = modules
                .iter()
                .map(|m| format!("`{}`", module_name(m)))
                .collect();
            format!("{} ({})", m.join(", "), plural(names.len(), "parameter"))
        } else {
            name_list(&names)
        };
        let op = cut.op.trim_start_matches("Tensor.");
        let op = if cut.op.starts_with("Tensor.") {
            format!(".{op}()")
        } else {
            cut.op.clone()
        };
        // A gradient term that adds nothing while everything still learns: a warning.
        let learned_before = !keys.is_empty()
            && keys
                .iter()
                .all(|k| ctx.facts.get(*k).is_some_and(|f| f.learns()));
        let severity = if (keys.is_empty() && kind.kind == "create_graph") || learned_before {
            Severity::Warning
        } else {
            Severity::Error
        };
        let mut message = (kind.what)(&op, &who);
        let mut steps = vec![cut.step];
        if learned_before {
            // The first step in which these parameters had no gradient any more.
            let first = keys
                .iter()
                .filter_map(|k| ctx.facts.get(*k))
                .filter_map(|f| f.grad_norms.iter().position(Option::is_none))
                .min()
                .map_or(cut.step, |i| i as u32 + 1);
            message = format!("From step {first} on: {message}");
            steps = (first..=ctx.facts.steps_observed).collect();
        }
        // The chain starts at the parameter, by its final name.
        let mut chain: Vec<String> = names
            .first()
            .map(|n| format!("`{n}`"))
            .into_iter()
            .collect();
        chain.extend(cut.chain.iter().cloned());
        let mut f = Finding::new(kind.code, kind.category, severity, message)
            .params(names)
            .chain(chain)
            .fix(kind.fix)
            .steps(steps);
        // For no_grad the line to change is the one that disabled grad; the op is related.
        // For no_grad the line to change is the one that disabled grad (found in the source
        // around the op, else where the tracer saw grad turned off); the op is related.
        let (loc, related) = if kind.kind == "no_grad" {
            let frames = cut.location.iter().chain(
                cut.related
                    .iter()
                    .filter(|r| r.message == "called from here")
                    .map(|r| &r.location),
            );
            let from_source = frames.into_iter().find_map(|l| {
                let line = ctx.source.borrow_mut().grad_disabler(&l.file, l.line)?;
                Some(gradsleuth_model::Location::new(l.file.clone(), line))
            });
            let site = from_source
                .or_else(|| {
                    cut.related
                        .iter()
                        .find(|r| r.message != "called from here")
                        .map(|r| r.location.clone())
                })
                .or_else(|| cut.location.clone());
            (
                site,
                vec![(
                    cut.location.clone(),
                    "the op that ran without grad".to_owned(),
                )],
            )
        } else {
            (
                cut.location.clone(),
                cut.related
                    .iter()
                    .map(|r| (Some(r.location.clone()), r.message.clone()))
                    .collect(),
            )
        };
        f = f.at(ctx.locate(loc.as_ref()));
        for (l, m) in related {
            f = f.related(ctx.locate(l.as_ref()), m);
        }
        f.confidence = Some(0.95);
        ctx.claim_by_cut(keys.iter().copied());
        out.push(f);
    }
    out
}
