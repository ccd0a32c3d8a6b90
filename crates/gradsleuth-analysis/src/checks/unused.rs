//! GS102 `unused`: registered parameters the loss never reaches because their module did not
//! run (always, or in some steps), or because `forward` never reads them.

use gradsleuth_model::capture::ModuleRec;
use gradsleuth_model::{Finding, Severity};

use super::{module_assignment, module_name, plural, trainable_params, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS102", run };

/// Forward passes of `m`'s model, not counting one that raised before reaching `m` (the
/// script failed in the forward of its last step, e.g. in DDP's pre-forward check).
fn root_runs(ctx: &Context, m: &ModuleRec) -> u32 {
    let runs = m
        .root
        .and_then(|r| ctx.capture.module(r))
        .map_or(0, |r| r.runs);
    let failed_in_forward = ctx.capture.error.is_some()
        && ctx
            .capture
            .progress
            .as_ref()
            .is_some_and(|p| p.phase == gradsleuth_model::capture::Phase::Forward);
    if failed_in_forward && m.runs < runs {
        runs - 1
    } else {
        runs
    }
}

/// The highest ancestor of `m` (inside its root) that never ran. `ran_inside`: modules with
/// a child that ran (a container never runs itself: it did not "run" only if none of its
/// children did).
fn top_not_run<'c>(
    ctx: &'c Context,
    m: &'c ModuleRec,
    ran_inside: &std::collections::HashSet<u64>,
) -> &'c ModuleRec {
    ancestors(ctx, m)
        .skip(1)
        .take_while(|p| p.runs == 0 && !ran_inside.contains(&p.key))
        .last()
        .unwrap_or(m)
}

/// The highest ancestor of `m` (below its root) that ran exactly as often: a layer skipped
/// as a whole is one group, not one per submodule.
fn top_same_runs<'c>(ctx: &'c Context, m: &'c ModuleRec) -> &'c ModuleRec {
    ancestors(ctx, m)
        .skip(1)
        .take_while(|p| p.runs == m.runs && Some(p.key) != m.root)
        .last()
        .unwrap_or(m)
}

/// A line found in the source from `m`'s first call site (`find(file, call line)`), located.
fn near_call(
    ctx: &Context,
    m: &ModuleRec,
    find: impl FnOnce(&mut gradsleuth_source::SourceCache, &str, u32) -> Option<u32>,
) -> Option<gradsleuth_model::Location> {
    let call = m.first_call.as_ref()?;
    let loc = {
        let mut src = ctx.source.borrow_mut();
        let line = find(&mut src, &call.file, call.line)?;
        src.location(&call.file, line)
    };
    ctx.locate(Some(&loc))
}

/// The random draw that skips `m` at its call site, when there is one.
fn random_gate(ctx: &Context, m: &ModuleRec) -> Option<gradsleuth_model::Location> {
    near_call(ctx, m, |src, file, line| src.random_gate(file, line))
}

/// For a module that never ran: the random gate of a sibling of its class (same parent) that
/// ran sometimes. Under LayerDrop a layer can be skipped in every observed step.
fn sibling_gate(ctx: &Context, m: &ModuleRec) -> Option<gradsleuth_model::Location> {
    let parent = m.parent?;
    ctx.capture
        .modules
        .iter()
        .filter(|s| s.parent == Some(parent) && s.class == m.class && s.key != m.key && s.runs > 0)
        .find_map(|s| random_gate(ctx, s))
}

/// Does the module's class read `self.<attr>` anywhere other than where it assigns it?
fn class_reads(ctx: &Context, owner: &ModuleRec, attr: &str) -> Option<bool> {
    let def = owner.class_def.as_ref()?;
    let mut src = ctx.source.borrow_mut();
    let (a, b) = src.block_extent(&def.file, def.line)?;
    let lines = src.lines(&def.file)?;
    let needle = format!("self.{attr}");
    let reads = (a..=b).any(|n| {
        let l = gradsleuth_source::strip_comment(&lines[n as usize - 1]);
        let mut from = 0;
        while let Some(p) = l[from..].find(&needle) {
            let at = from + p + needle.len();
            let next = l[at..].chars().next();
            if !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !gradsleuth_source::assigns_attr(l, attr)
            {
                return true;
            }
            from = at;
        }
        // `getattr(self, "attr")` and `self.parameters()` style access count as reads.
        l.contains(&format!("\"{attr}\"")) && !l.contains("register_")
    });
    Some(reads)
}

fn run(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    // Module key of the reported group -> params.
    let mut never: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    let mut sometimes: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    let mut unread: std::collections::BTreeMap<(u64, String), Vec<u64>> = Default::default();
    let ran_inside: std::collections::HashSet<u64> = ctx
        .capture
        .modules
        .iter()
        .filter(|c| c.runs > 0)
        .filter_map(|c| c.parent)
        .collect();
    for (t, f) in trainable_params(ctx) {
        if ctx.is_claimed(t.key) {
            continue;
        }
        let Some(m) = t.module.and_then(|k| ctx.capture.module(k)) else {
            continue;
        };
        let total = root_runs(ctx, m);
        if total == 0 {
            continue;
        }
        // A library model whose own `forward` never ran while its parts did (the script
        // calls another method): its parameters no op read are told by
        // `unread_in_library`.
        let other_method = m.runs == 0
            && ran_inside.contains(&m.key)
            && ctx.capture.unread_params.contains(&t.key)
            && library_module(m);
        if other_method {
            continue;
        }
        // Inside a TorchScript module that ran: its children run as compiled code, unseen.
        if m.runs == 0 && super::inside_script(ctx, m) {
            continue;
        }
        if m.runs == 0 && !f.reached() {
            never
                .entry(top_not_run(ctx, m, &ran_inside).key)
                .or_default()
                .push(t.key);
        } else if m.runs < total && m.runs > 0 && m.key != m.root.unwrap_or(0) {
            sometimes
                .entry(top_same_runs(ctx, m).key)
                .or_default()
                .push(t.key);
        } else if m.runs > 0
            && !f.reached()
            && !f.grad_nonzero()
            && class_reads(ctx, m, &t.attr) == Some(false)
        {
            unread
                .entry((m.key, t.attr.clone()))
                .or_default()
                .push(t.key);
        }
    }
    // Skipped at random by design (LayerDrop): one info for all of them.
    let mut random: Vec<(&ModuleRec, Vec<u64>, gradsleuth_model::Location)> = Vec::new();
    for (mk, keys) in never {
        let Some(m) = ctx.capture.module(mk) else {
            continue;
        };
        if let Some(gate) = sibling_gate(ctx, m) {
            random.push((m, keys, gate));
            continue;
        }
        let root = m.root.and_then(|r| ctx.capture.module(r));
        let names = super::names(ctx, &keys);
        let total = root_runs(ctx, m);
        ctx.claim(keys.iter().copied());
        let parent = m.parent.and_then(|p| ctx.capture.module(p)).or(root);
        let forward = parent.and_then(|p| ctx.locate(p.forward_def.as_ref()));
        // The holder's forward calls it (itself, or as the items of a loop over it): then a
        // condition never met, or a line never reached, is why it never ran.
        let guarded = forward.as_ref().and_then(|def| {
            let mut src = ctx.source.borrow_mut();
            let call = src.submodule_call(&def.file, def.line, &m.attr)?;
            let branch = src.branch(&def.file, call);
            let draw = src.random_gate(&def.file, call);
            Some((
                src.location(&def.file, call),
                branch.map(|b| src.location(&def.file, b)),
                draw.map(|d| src.location(&def.file, d)),
            ))
        });
        let defined = module_assignment(ctx, m);
        let head = format!(
            "`{}` ({}) never ran in the {} observed forward passes of `{}`",
            module_name(m),
            m.class,
            total,
            root.map_or("the model".into(), |r| r.class.clone()),
        );
        let params = plural(names.len(), "parameter");
        let f = match guarded {
            Some((call, Some(branch), draw)) => CHECK
                .finding(Severity::Error, format!("{head}: forward calls it only inside a branch whose condition was false every time, so its {params} never get a gradient."))
                .at(ctx.locate(Some(&branch)))
                .related(ctx.locate(Some(&call)), "its call, inside this branch")
                .related(ctx.locate(draw.as_ref()), "a random draw decides it (LayerDrop): it skipped every time")
                .related(defined, "defined here")
                .chain([format!("`{}` called only under a condition", module_name(m)), "the condition false in every forward ✗".into(), "no path to the loss".into()])
                .fix("Check the condition (a flag or config value, `self.training`, a skip probability): it was false in every observed step, so the module never runs. If it is meant to run only sometimes, this is expected for these steps."),
            Some((call, None, _)) => CHECK
                .finding(Severity::Error, format!("{head}: forward's line that calls it never ran (an earlier `return`, an exception caught, a loop with no iteration), so its {params} never get a gradient."))
                .at(defined)
                .related(ctx.locate(Some(&call)), "its call, never reached")
                .chain([format!("`{}` called in forward", module_name(m)), "that line never reached ✗".into(), "no path to the loss".into()])
                .fix("Check what ends forward before this line (an early `return`, a loop over an empty range), or move the call where it runs."),
            None => CHECK
                .finding(Severity::Error, format!("{head}, so its {params} never get a gradient."))
                .at(defined)
                .related(forward, "forward never calls it")
                .chain([format!("`{}` defined in __init__", module_name(m)), "never called in forward ✗".into(), "no path to the loss".into()])
                .fix(format!(
                    "Call `self.{}` in forward where its output is needed, or delete it (under DDP an unused module stops training unless `find_unused_parameters=True`).",
                    m.attr
                )),
        };
        out.push(f.params(names));
    }
    for (mk, keys) in sometimes {
        let Some(m) = ctx.capture.module(mk) else {
            continue;
        };
        if let Some(gate) = random_gate(ctx, m) {
            random.push((m, keys, gate));
            continue;
        }
        let names = super::names(ctx, &keys);
        let total = root_runs(ctx, m);
        ctx.claim(keys.iter().copied());
        // Where it is decided: the branch around its call, else the call; the definition
        // related.
        let call = ctx.locate(m.first_call.as_ref());
        let branch = near_call(ctx, m, |src, file, line| src.branch(file, line));
        let defined = module_assignment(ctx, m);
        let (at, related) = match (branch, call) {
            (Some(b), call) => (
                Some(b),
                vec![
                    (call, "called only in this branch"),
                    (defined, "defined here"),
                ],
            ),
            (None, Some(c)) => (Some(c), vec![(defined, "defined here")]),
            (None, None) => (defined, Vec::new()),
        };
        let mut f = CHECK.finding(Severity::Warning,
                format!("`{}` ran in only {} of {} forward passes: its {} learn only in those steps (a conditional branch).", module_name(m), m.runs, total, plural(names.len(), "parameter")),
            );
        for (loc, why) in related {
            f = f.related(loc, why);
        }
        out.push(
            f
            .params(names)
            .at(at)
            .fix("If the branch is meant to be conditional, this is expected (under DDP use `find_unused_parameters=True`); otherwise check the condition that skips it."),
        );
    }
    if let Some((first, _, gate)) = random.first() {
        let keys: Vec<u64> = random
            .iter()
            .flat_map(|(_, k, _)| k.iter().copied())
            .collect();
        let names = super::names(ctx, &keys);
        ctx.claim(keys.iter().copied());
        let shown: Vec<String> = random
            .iter()
            .take(4)
            .map(|(m, _, _)| format!("`{}` ({} of {})", module_name(m), m.runs, root_runs(ctx, m)))
            .collect();
        let more = if random.len() > 4 {
            format!(" and {} more", random.len() - 4)
        } else {
            String::new()
        };
        out.push(
            CHECK
                .finding(
                    Severity::Info,
                    format!(
                        "{}{more} (runs of the observed forward passes) are skipped at random (LayerDrop / stochastic depth): by design, their {} learn in the steps they run.",
                        shown.join(", "),
                        plural(names.len(), "parameter")
                    ),
                )
                .params(names)
                .at(Some(gate.clone()))
                .related(first.first_call.as_ref().and_then(|l| ctx.locate(Some(l))), "the call it skips")
                .fix("Nothing to fix; under DDP, skipped layers need `find_unused_parameters=True` (or `static_graph=False`)."),
        );
    }
    out.extend(dead_outputs(ctx));
    for ((mk, attr), keys) in unread {
        let Some(m) = ctx.capture.module(mk) else {
            continue;
        };
        let names = super::names(ctx, &keys);
        ctx.claim(keys.iter().copied());
        out.push(
            CHECK.finding(Severity::Error,
                format!("`{}` is registered on `{}` but its code never reads `self.{attr}`, so it never gets a gradient.", names.join("`, `"), m.class),
            )
            .params(names)
            .at(super::attr_assignment(ctx, m, &attr))
            .related(ctx.locate(m.forward_def.as_ref()), "forward does not use it")
            .fix(format!("Use `self.{attr}` in `{}.forward`, or delete it.", m.class)),
        );
    }
    out.extend(unread_in_library(ctx));
    out
}

/// Parameters of an installed library's module that no op read in the op-level step: the
/// script calls a part of the model that does not use them (`CLIPModel.get_text_features`
/// never reads `logit_scale`, which only `forward` uses). The library's design: info.
fn unread_in_library(ctx: &Context) -> Vec<Finding> {
    use std::collections::BTreeMap;
    if backward_failed(ctx) {
        return Vec::new();
    }
    let mut by_module: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (t, f) in trainable_params(ctx) {
        if ctx.is_claimed(t.key)
            || f.status != gradsleuth_model::ParamStatus::GradNone
            || !ctx.capture.unread_params.contains(&t.key)
        {
            continue;
        }
        let Some(m) = t.module.and_then(|k| ctx.capture.module(k)) else {
            continue;
        };
        if library_module(m) {
            by_module.entry(m.key).or_default().push(t.key);
        }
    }
    let mut out = Vec::new();
    for (mk, keys) in by_module {
        let Some(m) = ctx.capture.module(mk) else {
            continue;
        };
        ctx.claim(keys.iter().copied());
        let names = super::names(ctx, &keys);
        let one = names.len() == 1;
        out.push(
            CHECK
                .finding(
                    Severity::Info,
                    format!(
                        "{} {} read by no op in the observed step: the parts of `{}` ({}) the script calls do not use {}, so {} no gradient. This is the library model's design when only part of it is used.",
                        super::name_list(&names),
                        if one { "is" } else { "are" },
                        module_name(m),
                        m.class,
                        if one { "it" } else { "them" },
                        if one { "it gets" } else { "they get" },
                    ),
                )
                .params(names)
                .at(ctx.locate(m.first_call.as_ref().or(m.assigned_at.as_ref())))
                .fix("Nothing to fix if the script uses only part of the model (a `get_text_features`-style method); leave these out of the optimizer to make it explicit."),
        );
    }
    out
}

/// `m` and its ancestors, innermost first (at most 1,000: a capture is untrusted input).
fn ancestors<'c>(ctx: &'c Context, m: &'c ModuleRec) -> impl Iterator<Item = &'c ModuleRec> {
    std::iter::successors(Some(m), |c| c.parent.and_then(|p| ctx.capture.module(p))).take(1000)
}

/// Whether `m` or a module inside it made an output that no op used in the op-level step.
fn output_unused(ctx: &Context, m: &ModuleRec) -> bool {
    ctx.capture.unused_outputs.iter().any(|&k| {
        ctx.capture
            .module(k)
            .is_some_and(|u| ancestors(ctx, u).any(|a| a.key == m.key))
    })
}

/// Every backward raised: no parameter got a gradient because of that error, which its own
/// finding tells; what the op-level step saw of outputs and reads explains nothing.
fn backward_failed(ctx: &Context) -> bool {
    !ctx.capture.backwards.is_empty() && ctx.capture.backwards.iter().all(|b| b.error.is_some())
}

/// A module whose code is an installed package's.
fn library_module(m: &ModuleRec) -> bool {
    m.forward_def
        .as_ref()
        .or(m.class_def.as_ref())
        .is_some_and(|l| super::is_library(&l.file))
}

/// A module that ran and whose output no op used, seen by the op-level step: its own
/// unreached parameters (taken from `left`). A library model's part the user's loss does not
/// take (BertModel's pooler under a loss on the hidden states) is the library's design: info.
/// In the user's own code it is a result computed and dropped (an auxiliary head whose loss
/// term was forgotten): an error.
fn unused_output(
    ctx: &Context,
    m: &ModuleRec,
    left: &mut std::collections::BTreeMap<u64, Vec<u64>>,
) -> Option<Finding> {
    if !output_unused(ctx, m) || backward_failed(ctx) {
        return None;
    }
    let keys: Vec<u64> = left
        .iter()
        .filter(|(_, above)| above.contains(&m.key))
        .map(|(k, _)| *k)
        .collect();
    if keys.is_empty() {
        return None;
    }
    for k in &keys {
        left.remove(k);
    }
    ctx.claim(keys.iter().copied());
    let names = super::names(ctx, &keys);
    let what = format!(
        "`{}` ({})",
        module_name(m),
        plural(names.len(), "parameter")
    );
    let library = library_module(m);
    let call = ctx.locate(m.first_call.as_ref());
    let f = if library {
        let owner = m
            .parent
            .and_then(|p| ctx.capture.module(p))
            .map_or_else(String::new, |o| {
                format!(" of `{}` ({})", module_name(o), o.class)
            });
        // PEFT adapters the config put on it never train: say so, with the config's fix.
        let mut layers: Vec<String> = Vec::new();
        for k in &keys {
            if let Some(l) = ctx.facts.rec(*k).and_then(|t| super::adapter_layer(ctx, t)) {
                // As `target_modules` names it: inside the model, without the root's name.
                let root = l
                    .root
                    .and_then(|r| ctx.capture.module(r))
                    .map(|r| format!("{}.", r.name));
                let name = module_name(l);
                let name = root
                    .and_then(|r| name.strip_prefix(r.as_str()).map(str::to_owned))
                    .unwrap_or(name);
                if !layers.contains(&name) {
                    layers.push(name);
                }
            }
        }
        let (adapters, fix) = match layers.is_empty() {
            true => (String::new(), "Nothing to fix if you do not need this output; to skip computing it, build the model without it if the library allows (for BERT-like models, `add_pooling_layer=False`).".to_owned()),
            false => (
                format!(" The adapters PEFT put on {} therefore never train.", super::name_list(&layers)),
                format!("Leave {} out of the adapter config's `target_modules` (a suffix such as `\"dense\"` matches every module ending in it), or use this output in the loss.", super::name_list(&layers)),
            ),
        };
        CHECK
            .finding(
                Severity::Info,
                format!("{what} runs in forward, but no op uses its output: the loss is built from other outputs{owner}, so it gets no gradient. This is the library model's design when only part of its output is used.{adapters}"),
            )
            .fix(fix)
    } else {
        CHECK
            .finding(
                Severity::Error,
                format!("{what} runs in forward, but no op uses its output: it is computed and dropped, so no gradient reaches it."),
            )
            .fix("Use its output in the loss (a loss term that was meant to be added?), or stop calling it and delete it.")
    };
    Some(f.params(names).at(call).chain([
        format!("{}(...) runs", module_name(m)),
        "its output is used by no op ✗".into(),
        "no path to the loss".into(),
    ]))
}

/// Modules that ran with recording on and whose output never reached the loss, because the
/// code that called them dropped it: the value their call assigned is overwritten before it
/// is read (`output = self.decoder(...)` then `output = tgt`), or never read at all (a head
/// fed the input instead of the features). Every parameter upstream of the dropped output
/// that no gradient reached is named, at the line that drops it.
fn dead_outputs(ctx: &Context) -> Vec<Finding> {
    use std::collections::{BTreeMap, HashSet};
    let mut out = Vec::new();
    // Unreached parameters of modules that ran with recording on, with their module's
    // ancestors; and the modules with a reached parameter somewhere below them.
    let mut left: BTreeMap<u64, Vec<u64>> = Default::default();
    let mut reached_below: HashSet<u64> = HashSet::new();
    for (t, f) in trainable_params(ctx) {
        let Some(m) = t.module.and_then(|k| ctx.capture.module(k)) else {
            continue;
        };
        if f.reached() {
            reached_below.extend(ancestors(ctx, m).map(|a| a.key));
        } else if !ctx.is_claimed(t.key)
            && f.status == gradsleuth_model::ParamStatus::GradNone
            && m.runs > 0
            && m.runs_no_grad < m.runs
        {
            left.insert(t.key, ancestors(ctx, m).map(|a| a.key).collect());
        }
    }
    if left.is_empty() {
        return out;
    }
    // Candidates: modules that ran, with unreached parameters and none reached below them,
    // outermost first (fewest ancestors).
    let above_left: HashSet<u64> = left.values().flatten().copied().collect();
    let mut candidates: Vec<&ModuleRec> = ctx
        .capture
        .modules
        .iter()
        .filter(|m| m.runs > 0 && m.first_call.is_some() && Some(m.key) != m.root)
        .filter(|m| above_left.contains(&m.key) && !reached_below.contains(&m.key))
        .collect();
    candidates.sort_by_cached_key(|m| ancestors(ctx, m).count());
    // Modules whose drop the source does not show (the value escapes through a return, a
    // container, a library's output object): told from the op-level step afterwards, so an
    // inner module's dead store keeps its exact line.
    let mut unseen: Vec<&ModuleRec> = Vec::new();
    for m in candidates {
        if left.is_empty() {
            break;
        }
        let Some(call) = m.first_call.as_ref() else {
            continue;
        };
        let Some(dead) = ctx.source.borrow_mut().dead_store(&call.file, call.line) else {
            unseen.push(m);
            continue;
        };
        // What the dropped value fed: the module's siblings that only fed it are upstream of
        // it in the same parent (an encoder whose memory only the decoder read).
        let scope = m.parent.unwrap_or(m.key);
        let keys: Vec<u64> = left
            .iter()
            .filter(|(_, above)| above.contains(&scope))
            .map(|(k, _)| *k)
            .collect();
        if keys.is_empty() {
            continue;
        }
        for k in &keys {
            left.remove(k);
        }
        ctx.claim(keys.iter().copied());
        let names = super::names(ctx, &keys);
        let call_loc = ctx.locate(Some(call));
        let (loc, how, name) = match &dead {
            gradsleuth_source::DeadStore::Overwritten(line, name) => {
                let loc = ctx.source.borrow_mut().location(&call.file, *line);
                (
                    ctx.locate(Some(&loc)),
                    "is overwritten here before it is read".to_owned(),
                    name.clone(),
                )
            }
            gradsleuth_source::DeadStore::NeverUsed(name) => {
                (call_loc.clone(), "is never read".to_owned(), name.clone())
            }
        };
        out.push(
            CHECK
                .finding(
                    Severity::Error,
                    format!(
                        "`{}` runs, but its output `{name}` {how}: nothing it computes reaches the loss, so {} never {} a gradient.",
                        module_name(m),
                        super::name_list(&names),
                        if names.len() == 1 { "gets" } else { "get" }
                    ),
                )
                .params(names)
                .at(loc)
                .related(call_loc, format!("`{}` is called here", module_name(m)))
                .chain([
                    format!("`{name}` = {}(...)", module_name(m)),
                    format!("`{name}` dropped ✗"),
                    "no path to the loss".into(),
                ])
                .fix(format!("Use `{name}` where the computation continues (or remove the call if its result is not needed).")),
        );
    }
    for m in unseen {
        if let Some(f) = unused_output(ctx, m, &mut left) {
            out.push(f);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::ModuleKind;

    /// `aux` ran every step, but the op-level step saw no op use its output (the source
    /// shows nothing dropped: the value escapes through a return). In the user's code an
    /// error; in an installed library (a pooler the loss does not take) an info line.
    #[test]
    fn a_module_whose_output_no_op_used_is_told_so_and_is_info_in_a_library() {
        for (file, severity) in [
            ("/home/u/train.py", Severity::Error),
            (
                "/venv/lib/python3.11/site-packages/transformers/models/bert/modeling_bert.py",
                Severity::Info,
            ),
        ] {
            for unused in [vec![3], vec![]] {
                let mut s = healthy(2);
                let m = s.module(3, "Linear", "aux", Some(1), ModuleKind::Registered, 2);
                m.first_call = Some(gradsleuth_model::Location::new(file, 12));
                m.forward_def = Some(gradsleuth_model::Location::new(file, 40));
                s.param(20, "aux.weight", 3);
                s.param(21, "aux.bias", 3);
                s.capture.optimizers[0].params.extend([20, 21]);
                s.capture.unused_outputs = unused.clone();
                let f = s.run(&CHECK);
                if unused.is_empty() {
                    // Nothing known about its output: left to GS199.
                    assert!(f.is_empty(), "{f:?}");
                    continue;
                }
                assert_eq!(f.len(), 1, "{f:?}");
                assert_eq!(f[0].severity, severity, "{file}");
                assert_eq!(f[0].params, vec!["aux.weight", "aux.bias"]);
                assert!(
                    f[0].message.contains("no op uses its output"),
                    "{}",
                    f[0].message
                );
                assert_eq!(f[0].location.as_ref().unwrap().line, 12);
            }
        }
    }

    /// A library model's own parameter no op read in the step (only its `forward` uses it;
    /// the script calls another method): info. The same in the user's code is left to the
    /// checks that can say why.
    #[test]
    fn a_library_parameter_no_op_read_is_info() {
        for (file, found) in [
            (
                "/venv/lib/python3.11/site-packages/transformers/models/clip/modeling_clip.py",
                true,
            ),
            ("/home/u/model.py", false),
        ] {
            let mut s = healthy(2);
            let m = s.module(3, "CLIPModel", "clip", Some(1), ModuleKind::Registered, 0);
            m.forward_def = Some(gradsleuth_model::Location::new(file, 40));
            // Its `forward` never ran; the text tower inside it did.
            s.module(
                4,
                "CLIPTextTransformer",
                "clip.text_model",
                Some(3),
                ModuleKind::Registered,
                2,
            );
            s.param(20, "clip.logit_scale", 3);
            s.capture.optimizers[0].params.push(20);
            s.capture.unread_params = vec![20];
            let f: Vec<_> = s
                .run(&CHECK)
                .into_iter()
                .filter(|f| f.message.contains("read by no op"))
                .collect();
            assert_eq!(f.len(), usize::from(found), "{file}: {f:?}");
            if found {
                assert_eq!(f[0].severity, Severity::Info);
                assert_eq!(f[0].params, vec!["clip.logit_scale"]);
            }
        }
    }

    #[test]
    fn a_forgotten_head_is_named_with_its_line() {
        let mut s = healthy(3);
        let file = s.source("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n        self.aux = nn.Linear(4, 2)\n    def forward(self, x):\n        return self.fc(x)\n");
        s.capture.modules[0].class_def = Some(gradsleuth_model::Location::new(file, 1));
        s.module(3, "Linear", "aux", Some(1), ModuleKind::Registered, 0);
        s.param(20, "aux.weight", 3);
        s.param(21, "aux.bias", 3);
        s.capture.optimizers[0].params.extend([20, 21]);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message.contains("never ran in the 3 observed"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].location.as_ref().unwrap().line, 5);
    }

    #[test]
    fn a_module_called_only_under_a_condition_never_met_is_named_at_the_condition() {
        // `if self.use_aux:` false in every step: the branch is why, the call and the
        // definition related; without a branch around the call, the call never reached.
        let mut s = healthy(3);
        let file = s.source("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n        self.aux = nn.Linear(4, 2)\n    def forward(self, x):\n        h = self.fc(x)\n        if self.use_aux:\n            h = h + self.aux(h).sum()\n        return h\n");
        s.capture.modules[0].class_def = Some(gradsleuth_model::Location::new(file.clone(), 1));
        s.capture.modules[0].forward_def = Some(gradsleuth_model::Location::new(file.clone(), 6));
        s.module(3, "Linear", "aux", Some(1), ModuleKind::Registered, 0);
        s.param(20, "aux.weight", 3);
        s.capture.optimizers[0].params.push(20);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].message.contains("only inside a branch"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].location.as_ref().unwrap().line, 8);
        let related: Vec<u32> = f[0].related.iter().map(|r| r.location.line).collect();
        assert_eq!(related, vec![9, 5]);
        let file = s.source("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n        self.aux = nn.Linear(4, 2)\n    def forward(self, x):\n        return self.fc(x)\n        return self.aux(x)\n");
        s.capture.modules[0].class_def = Some(gradsleuth_model::Location::new(file.clone(), 1));
        s.capture.modules[0].forward_def = Some(gradsleuth_model::Location::new(file, 6));
        let f = s.run(&CHECK);
        assert!(
            f[0].message.contains("never ran (an earlier `return`"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].location.as_ref().unwrap().line, 5);
        assert_eq!(f[0].related[0].location.line, 8);
    }

    #[test]
    fn a_branch_taken_sometimes_is_a_warning() {
        let mut s = healthy(4);
        s.module(3, "Linear", "aux", Some(1), ModuleKind::Registered, 2);
        s.param(20, "aux.weight", 3);
        let f = s.run(&CHECK);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(f[0].message.contains("2 of 4"));
    }

    #[test]
    fn an_output_overwritten_before_use_is_named_at_the_overwrite() {
        let mut s = healthy(3);
        let file = s.source("class Net(nn.Module):\n    def forward(self, x):\n        h = self.fc(x)\n        out = self.aux(h)\n        out = h\n        return out\n");
        let m = s.module(3, "Linear", "aux", Some(1), ModuleKind::Registered, 3);
        m.first_call = Some(gradsleuth_model::Location::new(file, 4));
        s.param(20, "aux.weight", 3);
        s.capture.optimizers[0].params.push(20);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].params, vec!["aux.weight"]);
        assert_eq!(f[0].location.as_ref().unwrap().line, 5);
        assert!(f[0].message.contains("overwritten"), "{}", f[0].message);
    }

    #[test]
    fn modules_that_ran_are_fine() {
        assert!(healthy(3).run(&CHECK).is_empty());
    }
}
