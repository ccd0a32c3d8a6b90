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
cut_check!(non_differentiable, 6, "GS207", Category::NonDifferentiable, "non-differentiable",
    "argmax/argmin, round/floor/ceil/sign, comparisons and integer or bool casts have no useful gradient. A loss that reaches the model only through them leaves the model without gradient.");

/// Where the fix belongs: for `no_grad`, the line that disabled grad; else the op's line.
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
                    f.visible
                        && !f.learns()
                        && (!f.reached() || (cut.kind == "non_differentiable" && !f.grad_nonzero()))
                })
            })
            .collect();
        keys.dedup();
        if keys.is_empty() && kind.kind != "loss_rewrap" {
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
        let mut f = Finding::new(
            kind.code,
            kind.category,
            Severity::Error,
            (kind.what)(&op, &who),
        )
        .params(names)
        .chain(cut.chain.clone())
        .fix(kind.fix)
        .steps([cut.step]);
        // For no_grad the line to change is the one that disabled grad; the op is related.
        let (loc, related) = match (kind.kind, cut.related.first()) {
            ("no_grad", Some(r)) => (
                Some(r.location.clone()),
                vec![(
                    cut.location.clone(),
                    "the op that ran without grad".to_owned(),
                )],
            ),
            _ => (
                cut.location.clone(),
                cut.related
                    .iter()
                    .map(|r| (Some(r.location.clone()), r.message.clone()))
                    .collect(),
            ),
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
