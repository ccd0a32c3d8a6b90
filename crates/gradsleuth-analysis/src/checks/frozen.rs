//! GS101 `frozen`: parameters with `requires_grad=False`, deliberate or not.

use std::collections::{HashMap, HashSet, VecDeque};

use gradsleuth_model::{Finding, Severity};

use super::zero_behind::starved_by;
use super::{
    describe, module_assignment, module_name, name_list, plural, trainable_params, Check, Described,
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
    // Held by an optimizer (a warning: the optimizer says they should train) or not
    // (deliberate), one finding each. A freeze an installed library made as its design
    // (PEFT's `get_peft_model` freezing the base, a `freeze_feature_encoder()`), not undone
    // by the script, is deliberate even when the optimizer was given every parameter
    // (`AdamW(model.parameters())`, as PEFT's own examples do): torch's optimizers skip a
    // parameter that never gets a gradient, so holding it costs nothing.
    let by_library = |k: u64| {
        ctx.facts
            .rec(k)
            .and_then(|t| t.library_freeze.as_ref())
            .is_some_and(|f| f.unfrozen_at.is_none())
    };
    let (held, free): (Vec<u64>, Vec<u64>) = frozen
        .iter()
        .partition(|k| ctx.facts.get(**k).is_some_and(|f| !f.optimizers.is_empty()));
    let (held_by_library, held): (Vec<u64>, Vec<u64>) =
        held.into_iter().partition(|k| by_library(*k));
    let mut out = Vec::new();
    // Freshly initialised parameters frozen while the layers below them train: judged by
    // intent, not deliberate freezing.
    let split = |keys: Vec<u64>| {
        if trainable > 0 {
            fresh_over_trained(ctx, &keys)
        } else {
            (Fresh::default(), keys)
        }
    };
    let (mut fresh, free) = split(free);
    let (fresh_held, held_by_library) = split(held_by_library);
    fresh.params.extend(fresh_held.params);
    for p in fresh_held.below {
        if !fresh.below.contains(&p) {
            fresh.below.push(p);
        }
    }
    if !fresh.params.is_empty() {
        out.push(fresh_finding(ctx, &fresh));
    }
    for (keys, group) in [
        (held, Group::Held),
        (held_by_library, Group::HeldByLibrary),
        (free, Group::Free),
    ] {
        if keys.is_empty() {
            continue;
        }
        let is_held = group == Group::Held;
        let Described {
            what,
            modules,
            names,
        } = describe(ctx, &keys);
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
                    format!(
                        "{what} {are} frozen{}.{also}",
                        if group == Group::Free {
                            " and left out of the optimizer"
                        } else {
                            ""
                        }
                    ),
                )
                .at(froze.or(loc))
                .fix("Unfreeze the zero-initialised layer (or initialise it with non-zero weights) if the layers before it should train.")
        } else {
            let how = match group {
                Group::HeldByLibrary => {
                    let package = keys
                        .iter()
                        .find_map(|k| ctx.facts.rec(*k)?.library_freeze.as_ref())
                        .map_or("a library", |f| f.package.as_str());
                    format!("frozen by {package} (deliberate freezing); the optimizer holds them too, which costs nothing: a parameter without a gradient is skipped at each step")
                }
                _ => "frozen and left out of the optimizer (deliberate freezing)".to_owned(),
            };
            CHECK
                .finding(
                    Severity::Info,
                    match trained_summary(ctx).filter(|_| modules.len() > 4) {
                        // A large frozen base (a backbone, a model with adapters): what
                        // trains says more than the list of what does not.
                        Some(trains) => format!("{what} {are} {how}; what trains: {trains}."),
                        None => format!("{what} {are} {how}."),
                    },
                )
                .at(froze.or(loc))
        };
        out.push(finding.params(names));
    }
    out
}

/// Which of GS101's findings a frozen parameter belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    /// Held by an optimizer, frozen by the script (or by nothing seen).
    Held,
    /// Held by an optimizer, frozen by an installed library's code as its design.
    HeldByLibrary,
    /// Left out of every optimizer.
    Free,
}

/// Frozen parameters that were freshly initialised in a model loaded from weights, with
/// trainable layers below them.
#[derive(Debug, Default)]
struct Fresh {
    params: Vec<u64>,
    /// Trainable parameters whose gradient passes through them, nearest first.
    below: Vec<u64>,
}

/// Splits `frozen` (not held by any optimizer) into the parameters frozen against intent and
/// the rest. A parameter is frozen against intent when all of these hold:
/// - its model had weights loaded (`Capture::loaded`: `load_state_dict`, `from_pretrained`)
///   and it was not among them: freshly initialised, at random (a new classification head);
/// - a call during the run froze it (`frozen_at`), not its own module's constructor (a fixed
///   positional table is part of the architecture, `Capture::built_frozen`);
/// - the op-level graph passes the loss's gradient through its module to trainable
///   parameters outside it: the layers below it train, through a layer fixed at random.
///
/// Without loaded weights (a model trained from scratch with a fixed random projection), or
/// without a graph, nothing is judged.
fn fresh_over_trained(ctx: &Context, frozen: &[u64]) -> (Fresh, Vec<u64>) {
    let none = || (Fresh::default(), frozen.to_vec());
    let capture = ctx.capture;
    if capture.loaded.is_empty() {
        return none();
    }
    let Some(graph) = capture.graph.as_ref() else {
        return none();
    };
    let root_of = |k: u64| -> Option<u64> {
        let m = ctx.facts.rec(k)?.module?;
        capture.module(m).and_then(|m| m.root.or(Some(m.key)))
    };
    let loaded: HashSet<u64> = capture.loaded.iter().copied().collect();
    let built_frozen: HashSet<u64> = capture.built_frozen.iter().copied().collect();
    let loaded_roots: HashSet<u64> = loaded.iter().filter_map(|k| root_of(*k)).collect();
    let candidate = |k: u64| -> Option<u64> {
        let t = ctx.facts.rec(k)?;
        let fresh = !loaded.contains(&k)
            && !built_frozen.contains(&k)
            && t.frozen_at.is_some()
            && root_of(k).is_some_and(|r| loaded_roots.contains(&r));
        fresh.then_some(t.module?)
    };
    let parent: HashMap<u64, u64> = capture
        .modules
        .iter()
        .filter_map(|m| Some((m.key, m.parent?)))
        .collect();
    let within = |mut m: u64, top: u64| -> bool {
        for _ in 0..64 {
            if m == top {
                return true;
            }
            match parent.get(&m) {
                Some(&p) => m = p,
                None => return false,
            }
        }
        false
    };
    let inputs = super::graph_inputs(graph);
    // Per module: the trainable parameters outside it that its nodes pass gradient to.
    let mut below_of: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut out = Fresh::default();
    let mut rest = Vec::new();
    for &k in frozen {
        let Some(m) = candidate(k) else {
            rest.push(k);
            continue;
        };
        let below = below_of.entry(m).or_insert_with(|| {
            let mut seen = vec![false; graph.nodes.len()];
            let mut queue: VecDeque<u32> = graph
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.module.is_some_and(|x| within(x, m)))
                .map(|(i, _)| i as u32)
                .collect();
            let mut found = Vec::new();
            while let Some(i) = queue.pop_front() {
                let Some(s) = seen.get_mut(i as usize) else {
                    continue;
                };
                if std::mem::replace(s, true) {
                    continue;
                }
                if let Some(p) = graph.nodes[i as usize].param {
                    let trains = ctx.facts.rec(p).is_some_and(|t| {
                        t.requires_grad && t.module.is_none_or(|pm| !within(pm, m))
                    });
                    if trains && !found.contains(&p) {
                        found.push(p);
                    }
                }
                queue.extend(inputs[i as usize].iter().copied());
            }
            found
        });
        if below.is_empty() {
            rest.push(k);
            continue;
        }
        out.params.push(k);
        for p in below.iter() {
            if !out.below.contains(p) {
                out.below.push(*p);
            }
        }
    }
    (out, rest)
}

fn fresh_finding(ctx: &Context, fresh: &Fresh) -> Finding {
    let Described {
        what,
        modules,
        names,
    } = describe(ctx, &fresh.params);
    // The layers that train through it, by module, nearest first.
    let mut below: Vec<String> = Vec::new();
    for p in &fresh.below {
        let m = ctx
            .facts
            .rec(*p)
            .and_then(|t| t.module)
            .and_then(|m| ctx.capture.module(m));
        let name = m.map_or_else(|| super::names(ctx, &[*p]).join(""), module_name);
        if !below.contains(&name) {
            below.push(name);
        }
    }
    let (are, they, them, was) = if names.len() == 1 {
        ("is", "it", "it", "was")
    } else {
        ("are", "they", "them", "were")
    };
    // Where the module was made, when that is the user's code (a library's constructor says
    // nothing about the head the user swapped in).
    let loc = modules
        .first()
        .and_then(|m| module_assignment(ctx, m))
        .filter(|l| !super::is_library(&l.file));
    ctx.claim(fresh.params.iter().copied());
    CHECK
        .finding(
            Severity::Warning,
            format!(
                "{what} {are} frozen, but {they} {was} not loaded with the rest of the model's weights: freshly initialised, {they} will stay at random values while the layers below {them} ({}) train through {them}.",
                name_list(&below),
            ),
        )
        .at(freeze_site(ctx, &fresh.params).or(loc.clone()))
        .related(loc, "the freshly initialised module")
        .fix(format!(
            "Leave {first} out of the freeze (the name filter matched it too: keep it trainable where `name.startswith(\"{prefix}\")`) so the optimizer gets it; with PEFT, list it in `modules_to_save`.",
            first = modules.first().map_or_else(|| "it".to_owned(), |m| format!("`{}`", module_name(m))),
            prefix = modules.first().map_or_else(|| "head".to_owned(), |m| module_name(m)),
        ))
        .params(names)
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

    /// `fc` trains (loaded from a checkpoint); `head` above it was frozen at line 12 of the
    /// script. `head_loaded`: the checkpoint had the head too.
    fn frozen_head(head_loaded: bool) -> Scenario {
        use gradsleuth_model::capture::{GraphNode, GraphRec};
        let mut s = healthy(2);
        s.module(3, "Linear", "head", Some(1), ModuleKind::Registered, 2);
        for k in [20, 21] {
            let name = if k == 20 { "head.weight" } else { "head.bias" };
            let t = s.param(k, name, 3);
            t.requires_grad = false;
            t.frozen_at = Some(gradsleuth_model::Location::new("train.py", 12));
        }
        s.capture.loaded = if head_loaded {
            vec![10, 11, 20, 21]
        } else {
            vec![10, 11]
        };
        let node = |name: &str, module: u64, param: Option<u64>| GraphNode {
            name: name.into(),
            module: Some(module),
            param,
        };
        s.capture.graph = Some(GraphRec {
            nodes: vec![
                node("AddmmBackward0", 3, None),
                node("AddmmBackward0", 2, None),
                node("AccumulateGrad", 2, Some(10)),
                node("AccumulateGrad", 2, Some(11)),
            ],
            edges: vec![(0, 1), (1, 2), (1, 3)],
            truncated: false,
        });
        s
    }

    #[test]
    fn a_fresh_layer_frozen_over_trained_ones_is_a_warning_at_the_freeze() {
        let f = frozen_head(false).run(&CHECK);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].severity, Severity::Warning);
        let m = &f[0].message;
        assert!(m.contains("`head` (2 parameters) are frozen"), "{m}");
        assert!(m.contains("not loaded") && m.contains("(`fc`)"), "{m}");
        assert_eq!(f[0].location.as_ref().map(|l| l.line), Some(12));
        assert_eq!(f[0].params, ["head.weight", "head.bias"]);
    }

    #[test]
    fn freezing_is_deliberate_unless_every_condition_holds() {
        let info = |s: Scenario| {
            let f = s.run(&CHECK);
            assert_eq!(f.len(), 1, "{f:#?}");
            assert_eq!(f[0].severity, Severity::Info, "{}", f[0].message);
        };
        // Loaded with the rest (a pretrained head frozen on purpose).
        info(frozen_head(true));
        // Nothing loaded: a model trained from scratch with a fixed random layer.
        let mut s = frozen_head(false);
        s.capture.loaded.clear();
        info(s);
        // Frozen by its own constructor (a fixed table), or never by a call seen.
        let mut s = frozen_head(false);
        s.capture.built_frozen = vec![20, 21];
        info(s);
        let mut s = frozen_head(false);
        for t in &mut s.capture.tensors {
            t.frozen_at = None;
        }
        info(s);
        // No gradient passes through it to a trained layer.
        let mut s = frozen_head(false);
        s.capture.graph.as_mut().unwrap().edges.retain(|e| e.0 != 0);
        info(s);
        let mut s = frozen_head(false);
        s.capture.graph = None;
        info(s);
    }

    /// The backbone held by the optimizer, frozen by an installed library's code called from
    /// the script's line 9 (`get_peft_model`), unfrozen again at line 12 or not.
    fn frozen_by_library(unfrozen: bool) -> Scenario {
        let mut s = with_backbone(true);
        for t in &mut s.capture.tensors {
            if t.name.starts_with("backbone.") {
                t.frozen_at = Some(gradsleuth_model::Location::new("train.py", 9));
                t.library_freeze = Some(gradsleuth_model::capture::LibraryFreeze {
                    package: "peft".into(),
                    at: Some(gradsleuth_model::Location::new("train.py", 9)),
                    unfrozen_at: unfrozen.then(|| gradsleuth_model::Location::new("train.py", 12)),
                    ..Default::default()
                });
            }
        }
        s
    }

    #[test]
    fn a_library_freeze_the_optimizer_also_holds_is_info() {
        // PEFT's own examples: `get_peft_model(...)`, then `AdamW(model.parameters())`.
        let f = frozen_by_library(false).run(&CHECK);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].message
                .contains("frozen by peft (deliberate freezing)"),
            "{}",
            f[0].message
        );
        assert!(f[0].message.contains("costs nothing"), "{}", f[0].message);
        assert_eq!(f[0].location.as_ref().map(|l| l.line), Some(9));
        // The same freeze held by the optimizer, made by the script's own code: a warning.
        let mut s = frozen_by_library(false);
        for t in &mut s.capture.tensors {
            t.library_freeze = None;
        }
        let f = s.run(&CHECK);
        assert_eq!(f[0].severity, Severity::Warning, "{}", f[0].message);
        // A library's freeze the script undid, and that is frozen again by the time the run
        // ends: not the library's design any more.
        let f = frozen_by_library(true).run(&CHECK);
        assert_eq!(f[0].severity, Severity::Warning, "{}", f[0].message);
    }

    #[test]
    fn a_library_toggle_over_a_trained_parameter_is_no_freeze() {
        // Lightning's `toggle_optimizer`: observation ends while the library has turned the
        // flags off for another optimizer's step; these parameters got gradients and their
        // optimizer changed them in every observed step.
        let mut s = healthy(2);
        for t in &mut s.capture.tensors {
            t.requires_grad = false;
            t.library_freeze = Some(gradsleuth_model::capture::LibraryFreeze {
                package: "lightning".into(),
                at: Some(gradsleuth_model::Location::new("train.py", 20)),
                unfrozen_at: None,
                ..Default::default()
            });
        }
        assert!(s.run(&CHECK).is_empty());
        assert!(s.quiet(), "{:#?}", s.report().findings);
        // Turned back on by the library once already while observed: a toggle even when they
        // got no gradient (another cause's to tell).
        let mut s = frozen_by_library(false);
        s.capture.tensors.iter_mut().for_each(|t| {
            if let Some(l) = t.library_freeze.as_mut() {
                l.package = "lightning".into();
                l.toggled = true;
            }
        });
        assert!(s.run(&CHECK).is_empty());
        // The same flags on parameters that never trained while observed: a freeze.
        let mut s = frozen_by_library(false);
        s.capture.tensors.iter_mut().for_each(|t| {
            if t.name.starts_with("backbone.") {
                t.library_freeze.as_mut().unwrap().package = "lightning".into();
            }
        });
        assert_eq!(s.run(&CHECK).len(), 1);
    }

    #[test]
    fn nothing_frozen_nothing_said() {
        assert!(healthy(2).run(&CHECK).is_empty());
    }
}
