//! GS201–GS207: the op-level cuts. During the first observed iteration every torch call is
//! recorded; where a parameter's influence stops reaching the loss, the op and its line are
//! known. Each category is its own check (code, doc, message, fix); they share one runner.

use std::collections::{BTreeMap, HashSet};

use gradsleuth_model::capture::{
    Within, CHECKPOINT_OP, FUNCTION_APPLY_SUFFIX, INDICES_SUFFIX, INFERENCE_DATA_OP,
    INFERENCE_PARAMS_OP, INSIDE_LIBRARY, SAMPLERS,
};
use gradsleuth_model::{Category, Finding, Severity};

use super::{group_by_module, module_name, name_list, plural, Check};
use crate::Context;

/// Per-category text.
struct Kind {
    code: &'static str,
    /// What happened, given the op and what was cut off.
    what: fn(&str, &str) -> String,
    fix: &'static str,
}

/// The fix for a cut made by reentrant checkpointing (GS203's [`CHECKPOINT_OP`]).
const CHECKPOINT_FIX: &str = "Use non-reentrant checkpointing (`checkpoint(fn, x, use_reentrant=False)`; for a Hugging Face model `model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={\"use_reentrant\": False})`), or make the checkpointed input require grad (`model.enable_input_require_grads()` after freezing the base model, before training adapters).";

/// The fix for a cut inside a call that records no gradient by design (GS203's `inside`).
/// A sample drawn where the loss needs a gradient through it.
const SAMPLE_FIX: &str = "Draw with `.rsample()`, the reparameterised sample, which keeps the gradient to the distribution's parameters; a distribution without one (`Categorical`, `Bernoulli`) needs a score-function loss (`-(reward * dist.log_prob(sample)).mean()`) or a relaxed distribution (`F.gumbel_softmax`, `RelaxedOneHotCategorical`).";

fn inside_fix(call: &str) -> String {
    if call.rsplit('.').next() == Some("sample") {
        SAMPLE_FIX.to_owned()
    } else {
        format!("`{call}` records no gradient by design: compute what the loss needs outside it (for generated tokens, a forward pass of the model over them), or use a differentiable alternative.")
    }
}

/// The verb after `who` agrees with it: "`enc`, `head` (6 parameters) never get".
fn agree(message: String, who: &str) -> String {
    if !who.contains("`, `") {
        return message;
    }
    let Some(at) = message.find(who).map(|i| i + who.len()) else {
        return message;
    };
    let (head, rest) = message.split_at(at);
    let rest = [
        (" never gets ", " never get "),
        (" gets ", " get "),
        (" was ", " were "),
    ]
    .iter()
    .find_map(|(s, p)| rest.strip_prefix(s).map(|r| format!("{p}{r}")))
    .unwrap_or_else(|| rest.to_owned());
    format!("{head}{rest}")
}

const KINDS: &[Kind] = &[
    Kind {
        code: "GS201",
        what: |op, who| format!("`{op}` cuts {who} off the loss: no gradient flows back through it."),
        fix: "Remove the `.detach()` on this path (keep it only where you mean to stop gradients, e.g. targets); if you need a copy, use `.clone()`.",
    },
    Kind {
        code: "GS202",
        what: |_, who| format!("`.data` hands the loss a tensor outside autograd, so {who} never gets a gradient."),
        fix: "Use the tensor itself instead of `.data` (and `.detach()` only where gradients must stop); `.data` also hides in-place changes from autograd's checks.",
    },
    Kind {
        code: "GS203",
        what: |op, who| {
            if op == gradsleuth_model::capture::INFERENCE_DATA_OP {
                "A tensor made under `torch.inference_mode()` here is later used outside it in a way torch refuses (saved for backward where autograd records, or updated in place), and the script fails: an inference tensor can never enter a graph nor change outside `inference_mode`.".to_owned()
            } else if op == gradsleuth_model::capture::INFERENCE_PARAMS_OP {
                // The tracer's record of parameters made under `inference_mode`.
                format!("{who} was built or loaded under `torch.inference_mode()`: its parameters are inference tensors, which autograd can never record through (\"Inference tensors cannot be saved for backward\"), so it cannot be trained; build or load it outside `inference_mode` (or under `torch.no_grad()`).")
            } else if op == gradsleuth_model::capture::CHECKPOINT_OP {
                format!("{who}: reentrant gradient checkpointing (`use_reentrant=True`) runs this forward without recording, and none of its inputs requires grad, so its output has no history and these parameters never get a gradient (torch only warns \"None of the inputs have requires_grad=True\").")
            } else {
                format!("{who} ran with gradient recording disabled (`torch.no_grad()`/`inference_mode`), so its output has no history and it never gets a gradient.")
            }
        },
        fix: "Take this computation out of the `no_grad` block (keep `no_grad` for evaluation and target computations only).",
    },
    Kind {
        code: "GS204",
        what: |op, who| {
            // A method is shown as `.new_tensor()`: the call with its argument reads `x.new_tensor(t)`.
            let call = match op.strip_prefix('.') {
                Some(m) => format!("x.{}", m.replacen("()", "(t)", 1)),
                None => format!("{op}(t)"),
            };
            format!("`{call}` copies a tensor into a new one without history, so {who} never gets a gradient.")
        },
        fix: "Use the tensor itself (or `t.clone()`, `t.to(dtype)`, `torch.stack`/`torch.cat` of tensors) instead of `torch.tensor(t)`/`torch.as_tensor(t)`/`x.new_tensor(t)`.",
    },
    Kind {
        code: "GS205",
        what: |op, who| format!("`{op}` turns the value into Python numbers; what is computed from them has no history, so {who} never gets a gradient."),
        fix: "Keep the computation in torch ops (e.g. `torch.stack(values)` rather than `torch.tensor([v.item() for v in values])`, torch functions rather than numpy).",
    },
    Kind {
        code: "GS206",
        what: |_, who| format!("The loss is re-created as a new leaf tensor (`requires_grad=True` on a copy): backward runs without error but stops at it, so {who} never learns."),
        fix: "Call `backward()` on the loss tensor itself; never rebuild it with `torch.tensor(loss.item(), requires_grad=True)` or set `requires_grad` on a detached copy.",
    },
    Kind {
        code: "GS207",
        what: |op, who| format!("`{op}` is not differentiable (its output is an index, a boolean or piecewise constant), so {who} gets no gradient through it."),
        fix: "Use a differentiable surrogate: softmax/log-softmax instead of argmax, a straight-through estimator (`x + (x.round() - x).detach()`) for rounding, a soft mask (`torch.sigmoid(k * (x - t))`) instead of a comparison.",
    },
    Kind {
        code: "GS210",
        what: |op, who| format!("`{op}` passes no gradient here (saturated everywhere, or its mask selects nothing), so {who} gets an exactly zero gradient."),
        fix: "Check the bounds and the mask: normalise the input so the clamp is not saturated, make sure the mask selects something, or use a soft version (`torch.tanh`, a sigmoid mask).",
    },
    Kind {
        code: "GS211",
        what: |op, who| format!("`{op}` clips with a bound of 0, which sets every gradient to zero: {who} never changes."),
        fix: "Use a positive bound (`max_norm=1.0` is a common default); a bound from a config or schedule may be 0 by mistake.",
    },
    Kind {
        code: "GS212",
        what: |_, who| format!("A gradient hook returns zeros, so {who} gets an exactly zero gradient."),
        fix: "Return the gradient (or a rescaled one) from the hook, or `None` to leave it unchanged; to freeze, use `requires_grad_(False)`.",
    },
    Kind {
        code: "GS213",
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
        code: "GS214",
        what: |_, _| "The loss uses a graph built in an earlier step, whose buffers the first backward already freed (\"Trying to backward through the graph a second time\").".to_owned(),
        fix: "Recompute the tensor inside the training step (move it into the loop), or accumulate plain numbers (`total += loss.item()`); do not add `retain_graph=True` to silence it, that trains on stale values.",
    },
];

macro_rules! cut_check {
    ($name:ident, $idx:expr) => {
        pub mod $name {
            use super::*;
            pub const CHECK: Check = Check {
                code: KINDS[$idx].code,
                run,
            };
            fn run(ctx: &Context) -> Vec<Finding> {
                run_kind(ctx, &KINDS[$idx])
            }
        }
    };
}

cut_check!(detach, 0);
cut_check!(data_attr, 1);
cut_check!(no_grad, 2);
cut_check!(rewrap, 3);
cut_check!(numpy_roundtrip, 4);
cut_check!(loss_rewrap, 5);
cut_check!(dead_path, 7);
cut_check!(grad_clip, 8);
cut_check!(grad_hook, 9);
cut_check!(create_graph, 10);
cut_check!(stale_tensor, 11);
cut_check!(non_differentiable, 6);

/// Kinds that explain exactly-zero gradients (the parameter is reached, with zeros).
fn zero_kind(kind: Category) -> bool {
    matches!(
        kind,
        Category::NonDifferentiable | Category::DeadPath | Category::GradClip | Category::GradHook
    )
}

/// Where the fix belongs (for merging): for `no_grad`, the line that disabled grad as the
/// tracer saw it; else the op's line.
fn fix_site(cut: &gradsleuth_model::capture::CutRec) -> Option<(String, u32)> {
    let loc = match (cut.kind, cut.related.first()) {
        (Category::NoGrad, Some(r)) => Some(&r.location),
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
    // The cut's category is the registry's for the code.
    let rule = gradsleuth_rules::registered(kind.code);
    let category = rule.category();
    let mut out = Vec::new();
    // Cuts sharing the line to fix (ops inside one `no_grad` block) make one finding.
    let mut merged: Vec<Merged<'_>> = Vec::new();
    for cut in ctx.capture.cuts.iter().filter(|c| c.kind == category) {
        let site = fix_site(cut);
        match merged
            .iter_mut()
            .find(|(s, _, _)| site.is_some() && *s == site)
        {
            Some((_, _, params)) => params.extend(cut.params.iter().copied()),
            None => merged.push((site, cut, cut.params.clone())),
        }
    }
    // A parameter a hard cut (a detach, `.data`, a no_grad block, a rewrap, a NumPy round
    // trip) already cuts off: a non-differentiable op on its way too is not why it does not
    // learn (with the hard cut fixed, it does): the mask of `torch.where(h > 0, h.detach(),
    // ...)`, the shape-only `other` of `.view_as(h)`.
    let hard: HashSet<u64> = if category == Category::NonDifferentiable {
        ctx.capture
            .cuts
            .iter()
            .filter(|c| {
                matches!(
                    c.kind,
                    Category::Detach
                        | Category::DataAttr
                        | Category::NoGrad
                        | Category::Rewrap
                        | Category::NumpyRoundtrip
                )
            })
            .flat_map(|c| c.params.iter().copied())
            .collect()
    } else {
        HashSet::new()
    };
    for (_, cut, params) in merged {
        // Only parameters that never learned (not claimed by a more specific check).
        let mut keys: Vec<u64> = params
            .iter()
            .copied()
            .filter(|k| !ctx.is_claimed_before_cuts(*k) && !hard.contains(k))
            .filter(|k| {
                ctx.facts.get(*k).is_some_and(|f| {
                    // Any cut explains exactly zero gradients of what it names (the capture
                    // names a reached parameter only when its gradient was exactly zero and it
                    // fed the cut); a zero-gradient cut also gradients too small to change the
                    // weight (it made the features nearly constant).
                    let never = !f.learns()
                        && (!f.reached()
                            || !f.grad_nonzero()
                            || (zero_kind(cut.kind) && f.negligible_grad()));
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
        let standalone = matches!(
            category,
            Category::LossRewrap | Category::CreateGraph | Category::StaleTensor
        ) || cut.op == gradsleuth_model::capture::INFERENCE_DATA_OP;
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
        // An op's index output (`x.topk(k)`'s indices): the op itself, its values, are fine.
        let indices = cut
            .op
            .strip_suffix(INDICES_SUFFIX)
            .filter(|_| category == Category::NonDifferentiable);
        let op = indices.unwrap_or(&cut.op).trim_start_matches("Tensor.");
        let op = if op == "__array__" {
            // NumPy reading the tensor itself (`np.asarray(t)`, or a NumPy function given it).
            "np.asarray()".to_owned()
        } else if let Some(f) = ["float", "complex"]
            .into_iter()
            .find(|f| op.strip_prefix("__").and_then(|o| o.strip_suffix("__")) == Some(f))
        {
            // Python's conversion (`float(t)`, or a constructor reading the tensor as one).
            format!("{f}()")
        } else if cut.op.starts_with("Tensor.") {
            format!(".{op}()")
        } else {
            indices.unwrap_or(&cut.op).to_owned()
        };
        // A gradient term that adds nothing while everything still learns: a warning.
        let learned_before = !keys.is_empty()
            && keys
                .iter()
                .all(|k| ctx.facts.get(*k).is_some_and(|f| f.learns()));
        let severity = if (keys.is_empty() && category == Category::CreateGraph) || learned_before {
            Severity::Warning
        } else {
            Severity::Error
        };
        // Recording turned off by the library call at the user's line itself, with no block
        // of the user's around it (`Normal(mu, std).sample()`, `model.generate(...)`): the
        // user's lines only (a library's own `with torch.no_grad():` is the call's).
        let (call, function) = match &cut.within {
            Some(Within::Call(call)) => (Some(call.as_str()), None),
            Some(Within::FunctionBackward(name)) => (None, Some(name.as_str())),
            None => (None, None),
        };
        // A custom Function's call that returned an output without gradient: its class.
        let applied = cut
            .op
            .strip_suffix(FUNCTION_APPLY_SUFFIX)
            .filter(|_| indices.is_none() && category == Category::NonDifferentiable);
        // A random draw (`torch.multinomial`), named by the call at the user's line that made
        // it when there is one (`dist.sample()` of a `Categorical`).
        let sampled = (category == Category::NonDifferentiable
            && SAMPLERS.contains(&cut.op.rsplit('.').next().unwrap_or_default()))
        .then_some(call);
        let inside = call.filter(|_| category == Category::NoGrad).filter(|_| {
            let mut source = ctx.source.borrow_mut();
            !cut.location
                .iter()
                .chain(
                    cut.related
                        .iter()
                        .filter(|r| r.message != INSIDE_LIBRARY)
                        .map(|r| &r.location),
                )
                .any(|l| source.grad_disabler(&l.file, l.line).is_some())
        });
        let mut message = match (inside, function) {
            (Some(call), _) => format!("{who} feeds `{call}()`, which runs with gradient recording disabled (`torch.no_grad()` inside it), so what it returns has no history and these parameters never get a gradient."),
            (_, Some(name)) => format!("{who}: the path to the loss runs through `{name}`, a custom `autograd.Function` whose `backward` returns no gradient (None) for that input, so these parameters never get a gradient."),
            _ if sampled.is_some() => {
                let via = match sampled.flatten() {
                    Some(call) => format!("`{call}()`, which draws a sample (`{op}`)"),
                    None => format!("`{op}`, a random draw"),
                };
                agree(format!("{who} feeds {via}: a draw carries no gradient, so these parameters never get one through it."), &who)
            }
            _ if applied.is_some() => agree(format!("`{op}` (a custom `autograd.Function`) returns an output that needs no gradient (marked with `ctx.mark_non_differentiable`, or not a float tensor), so {who} gets no gradient through it."), &who),
            _ if indices.is_some() => agree(format!("`{op}` returns indices, which carry no gradient (only its values do), so {who} gets no gradient through them."), &who),
            // The modules ran with recording on; an op on their output did not (`bank[idx] =
            // emb` inside `torch.no_grad()`): that op is what the message names.
            _ if category == Category::NoGrad
                && !modules.is_empty()
                && modules.iter().all(|m| m.runs > 0 && m.runs_no_grad == 0)
                && ![INFERENCE_DATA_OP, INFERENCE_PARAMS_OP, CHECKPOINT_OP].contains(&cut.op.as_str()) =>
            {
                let shown = if op == ".__setitem__()" { "x[...] = ...".to_owned() } else { op.clone() };
                agree(format!("{who} ran with gradient recording on, but its output then goes through `{shown}` with recording disabled (`torch.no_grad()`/`inference_mode`): what that makes has no history, so these parameters never get a gradient."), &who)
            }
            _ => agree((kind.what)(&op, &who), &who),
        };
        // Step 0: a cause seen before any step (the script died building its model).
        let mut steps = if cut.step == 0 {
            Vec::new()
        } else {
            vec![cut.step]
        };
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
        // The chain starts at the parameter its nodes lead to, by its final name; when that one
        // is not named here (another check claimed it), from the first named parameter
        // straight to the cut, without another parameter's nodes.
        let (first, nodes) = match cut.chain_from {
            Some(k) if keys.contains(&k) => (super::names(ctx, &[k]).into_iter().next(), 0),
            Some(_) => (
                names.first().cloned(),
                cut.chain
                    .iter()
                    .position(|n| n.starts_with('✂'))
                    .unwrap_or(0),
            ),
            None => (names.first().cloned(), 0),
        };
        let mut chain: Vec<String> = first.map(|n| format!("`{n}`")).into_iter().collect();
        chain.extend(cut.chain[nodes..].iter().cloned());
        let checkpointed = cut.op == CHECKPOINT_OP;
        let fix = if checkpointed {
            CHECKPOINT_FIX.to_owned()
        } else if sampled.is_some() {
            SAMPLE_FIX.to_owned()
        } else if let Some(call) = inside {
            inside_fix(call)
        } else if let Some(name) = applied {
            format!("Leave `ctx.mark_non_differentiable` off an output the loss needs a gradient through, and return that gradient from `{name}.backward`; an output that is truly not differentiable (a rounding, an index) needs a path for the gradient beside it (a straight-through estimator: `x + ({name}.apply(x) - x).detach()`).")
        } else if let Some(name) = function {
            format!("Return a gradient from `{name}.backward` for every input of `forward` that needs one, in the order of `forward`'s arguments (None only where `ctx.needs_input_grad[i]` is False); `torch.autograd.gradcheck` compares a backward with numerical gradients.")
        } else {
            kind.fix.to_owned()
        };

        let mut f = gradsleuth_rules::registered(kind.code)
            .finding(severity, message)
            .params(names)
            .chain(chain)
            .fix(fix)
            .steps(steps);
        // For no_grad the line to change is the one that disabled grad (found in the source
        // around the op, else where the tracer saw grad turned off); the op is related.
        let library = cut
            .related
            .iter()
            .filter(|r| r.message == INSIDE_LIBRARY)
            .map(|r| (Some(r.location.clone()), r.message.clone()));
        let (loc, related) = if checkpointed {
            // The place that checkpoints (the user's call, or the user's line that called the
            // library that does); the op and the library line are related.
            let mut at = cut
                .related
                .iter()
                .find(|r| r.message != INSIDE_LIBRARY)
                .map(|r| r.location.clone())
                .or_else(|| cut.location.clone());
            let mut related: Vec<_> = library.collect();
            // A library checkpoints the model's layers: the user's line that turned it on
            // (`gradient_checkpointing_enable(...)`) is where the fix goes.
            let inside_library = cut.related.iter().any(|r| r.message == INSIDE_LIBRARY);
            if let Some(l) = at.clone().filter(|_| inside_library) {
                let enabler = ctx.source.borrow_mut().checkpoint_enabler(&l.file, l.line);
                if let Some(line) = enabler {
                    related.insert(
                        0,
                        (
                            Some(l.clone()),
                            "the checkpointed forward runs from here".to_owned(),
                        ),
                    );
                    at = Some(gradsleuth_model::Location::new(l.file.clone(), line));
                }
            }
            let same = |a: &Option<gradsleuth_model::Location>| {
                a.as_ref().map(|l| (&l.file, l.line))
                    == cut.location.as_ref().map(|l| (&l.file, l.line))
            };
            if !same(&at) && !related.iter().any(|(l, _)| same(l)) {
                related.push((
                    cut.location.clone(),
                    "the op that ran without grad".to_owned(),
                ));
            }
            (at, related)
        } else if inside.is_some() {
            // The user's line that made the call; where inside it recording went off is the
            // library's business (the library's own line, when installed, is related).
            (cut.location.clone(), library.collect())
        } else if category == Category::NoGrad {
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
                        .find(|r| r.message != "called from here" && r.message != INSIDE_LIBRARY)
                        .map(|r| r.location.clone())
                })
                .or_else(|| cut.location.clone());
            // The op, unless it is where the finding points (a tensor refused when no op of
            // the step ran it: the cut is the block itself).
            let mut related = Vec::new();
            fn line_of(l: &Option<gradsleuth_model::Location>) -> Option<(&str, u32)> {
                l.as_ref().map(|l| (l.file.as_str(), l.line))
            }
            if line_of(&site) != line_of(&cut.location) {
                related.push((
                    cut.location.clone(),
                    "the op that ran without grad".to_owned(),
                ));
            }
            related.extend(library);
            (site, related)
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use gradsleuth_model::capture::CutRec;
    use gradsleuth_model::{Category, Location};

    #[test]
    fn the_verb_agrees_with_several_modules() {
        let one = super::agree(
            "so `enc` (2 parameters) never gets a gradient.".into(),
            "`enc` (2 parameters)",
        );
        assert_eq!(one, "so `enc` (2 parameters) never gets a gradient.");
        let two = super::agree(
            "so `enc`, `head` (6 parameters) never gets a gradient.".into(),
            "`enc`, `head` (6 parameters)",
        );
        assert_eq!(two, "so `enc`, `head` (6 parameters) never get a gradient.");
    }

    /// `fc.bias` (key 11) reached by every backward with an exactly zero gradient (`zero`) or
    /// a real one, and named by a detach the loss depends on.
    fn detach_naming_the_bias(zero: bool) -> Scenario {
        let mut s = healthy(2);
        if zero {
            for st in &mut s.capture.steps {
                for g in &mut st.grad_norms {
                    if g.0 == 11 {
                        g.1 = Some(0.0);
                    }
                }
                let before = st.weight_before.iter().find(|b| b.0 == 11).unwrap().1;
                for w in &mut st.weight_after {
                    if w.0 == 11 {
                        w.1 = before;
                    }
                }
            }
        }
        s.capture.cuts.push(CutRec {
            kind: Category::Detach,
            op: "Tensor.detach".into(),
            location: Some(Location::new("train.py", 12)),
            params: vec![11],
            step: 1,
            ..Default::default()
        });
        s
    }

    /// A parameter whose only live path ran through the detach gets an exactly zero gradient
    /// from what remains: the detach is its cause (one error at the detach), not a harmless
    /// cancellation; one that still learns is not named.
    #[test]
    fn a_hard_cut_explains_an_exactly_zero_gradient_it_names() {
        let r = detach_naming_the_bias(true).report();
        let codes: Vec<&str> = r.findings.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, vec!["GS201"], "{r:?}");
        assert_eq!(r.findings[0].params, vec!["fc.bias"]);
        assert!(detach_naming_the_bias(false).report().findings.is_empty());
    }

    /// A non-differentiable op beside a hard cut of the same parameter (the mask of
    /// `torch.where(h > 0, h.detach(), ...)`) is not a second reason: one error, the detach's.
    #[test]
    fn a_non_differentiable_op_beside_a_hard_cut_is_not_told() {
        let mut s = detach_naming_the_bias(true);
        s.capture.cuts.push(CutRec {
            kind: Category::NonDifferentiable,
            op: "Tensor.gt".into(),
            location: Some(Location::new("train.py", 12)),
            params: vec![11],
            step: 1,
            ..Default::default()
        });
        let r = s.report();
        let codes: Vec<&str> = r.findings.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, vec!["GS201"], "{r:?}");
        // Alone, it is told.
        s.capture.cuts.remove(0);
        let codes: Vec<String> = s.report().findings.into_iter().map(|f| f.code).collect();
        assert_eq!(codes, vec!["GS207"]);
    }

    /// The chain's nodes lead to one parameter: the chain names that one, and never puts
    /// another parameter's name before them.
    #[test]
    fn the_chain_starts_from_the_parameter_its_nodes_lead_to() {
        let chain = |from: Option<u64>| {
            let mut s = detach_naming_the_bias(true);
            s.capture.cuts[0].chain = vec![
                "AddBackward0".into(),
                "✂ Tensor.detach at train.py:12".into(),
                "loss".into(),
            ];
            s.capture.cuts[0].chain_from = from;
            s.report().findings[0].chain.clone()
        };
        assert_eq!(
            chain(Some(11)),
            [
                "`fc.bias`",
                "AddBackward0",
                "✂ Tensor.detach at train.py:12",
                "loss"
            ]
        );
        // Led to `fc.weight`, which learns and is not named: no nodes of its path.
        assert_eq!(
            chain(Some(10)),
            ["`fc.bias`", "✂ Tensor.detach at train.py:12", "loss"]
        );
    }
}
