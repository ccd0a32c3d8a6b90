//! The runtime checks, one file each (ruff's one-rule-one-file layout).
//!
//! Every check has a stable code, the schema category it reports, a doc text (what it finds,
//! why training breaks, the fix) and its own tests. [`ALL`] runs them from the most specific
//! to the catch-all [`unexplained`], which reports any parameter that still does not learn.

use std::collections::{BTreeMap, HashMap, HashSet};

use gradsleuth_model::capture::{ModuleRec, TensorKind, TensorRec};
use gradsleuth_model::{Finding, Location, Severity};

use crate::Context;

pub mod adapter_unfrozen;
pub mod buffer_not_param;
pub mod compiled_region;
pub mod fixed_model;
pub mod frozen;
pub mod functional_template;
pub mod grad_cleared;
pub mod graph_cut;
pub mod inplace;
pub mod never_stepped;
pub mod no_backward;
pub mod non_leaf_param;
pub mod optimizer_missing;
pub mod optimizer_stale;
pub mod recreated_weights;
pub mod scaler_skipped;
pub mod unexplained;
pub mod unregistered;
pub mod untouched;
pub mod unused;
pub mod watch;
pub mod zero_behind;
pub mod zero_grad_order;

/// Classes of TorchScript modules (`torch.jit.script` / `torch.jit.trace`): their forward and
/// their children's run as compiled code, which no Python hook or mode sees.
pub(crate) const SCRIPT_CLASSES: &[&str] = &[
    "RecursiveScriptModule",
    "ScriptModule",
    "TopLevelTracedModule",
    "TracedModule",
];

/// `m` is a TorchScript module, or inside one, and the compiled code ran (it or an ancestor
/// ran): whether its own forward ran is not observable.
pub(crate) fn inside_script(ctx: &Context, m: &ModuleRec) -> bool {
    lineage(ctx, m.key).any(|c| SCRIPT_CLASSES.contains(&c.class.as_str()))
        && lineage(ctx, m.key).any(|c| c.runs > 0)
}

/// Module `key` and the modules holding it, innermost first (at most 64).
pub(crate) fn lineage<'c>(ctx: &'c Context, key: u64) -> impl Iterator<Item = &'c ModuleRec> {
    std::iter::successors(ctx.capture.module(key), move |m| {
        m.parent.and_then(|p| ctx.capture.module(p))
    })
    .take(64)
}

/// A runtime check: its code (its name, category and documentation are the rule registry's,
/// `gradsleuth-rules`) and what it runs.
pub struct Check {
    pub code: &'static str,
    pub run: fn(&Context) -> Vec<Finding>,
}

impl Check {
    /// The check's registry entry.
    pub fn rule(&self) -> gradsleuth_rules::Rule {
        gradsleuth_rules::registered(self.code)
    }

    /// A finding of this check.
    pub fn finding(&self, severity: Severity, message: impl Into<String>) -> Finding {
        self.rule().finding(severity, message)
    }
}

/// Every check, in the order they run (specific first, catch-all last).
pub const ALL: &[Check] = &[
    no_backward::CHECK,
    functional_template::CHECK,
    fixed_model::CHECK,
    compiled_region::CHECK,
    non_leaf_param::CHECK,
    buffer_not_param::CHECK,
    unregistered::CHECK,
    recreated_weights::CHECK,
    graph_cut::detach::CHECK,
    graph_cut::data_attr::CHECK,
    graph_cut::no_grad::CHECK,
    graph_cut::rewrap::CHECK,
    graph_cut::numpy_roundtrip::CHECK,
    graph_cut::loss_rewrap::CHECK,
    graph_cut::non_differentiable::CHECK,
    graph_cut::dead_path::CHECK,
    graph_cut::grad_clip::CHECK,
    graph_cut::grad_hook::CHECK,
    graph_cut::create_graph::CHECK,
    graph_cut::stale_tensor::CHECK,
    inplace::saved::CHECK,
    inplace::leaf::CHECK,
    adapter_unfrozen::CHECK,
    frozen::CHECK,
    scaler_skipped::CHECK,
    never_stepped::CHECK,
    untouched::CHECK,
    zero_grad_order::CHECK,
    grad_cleared::CHECK,
    optimizer_stale::CHECK,
    optimizer_missing::CHECK,
    unused::CHECK,
    watch::nonfinite::CHECK,
    watch::exploding::CHECK,
    watch::vanishing::CHECK,
    watch::dead::CHECK,
    watch::stopped::CHECK,
    watch::scaler_storm::CHECK,
    watch::armed::CHECK,
    unexplained::CHECK,
];

/// The check with this code.
pub fn by_code(code: &str) -> Option<&'static Check> {
    ALL.iter().find(|c| c.code == code)
}

/// Parameters (by key) grouped under the largest modules all of whose parameters are in the
/// set: "`backbone` (12 parameters)" rather than twelve lines.
pub struct Group {
    pub module: Option<u64>,
    pub keys: Vec<u64>,
}

pub fn group_by_module(ctx: &Context, keys: &[u64]) -> Vec<Group> {
    let cap = ctx.capture;
    let wanted: HashSet<u64> = keys.iter().copied().collect();
    let parent: HashMap<u64, Option<u64>> = cap.modules.iter().map(|m| (m.key, m.parent)).collect();
    // Count, per module, the visible tensors under it and those in the set.
    let mut total: HashMap<u64, usize> = HashMap::new();
    let mut hit: HashMap<u64, usize> = HashMap::new();
    for (t, f) in ctx.facts.iter() {
        if !f.visible {
            continue;
        }
        let mut m = t.module;
        let mut guard = 0;
        while let Some(k) = m {
            *total.entry(k).or_default() += 1;
            if wanted.contains(&t.key) {
                *hit.entry(k).or_default() += 1;
            }
            m = parent.get(&k).copied().flatten();
            guard += 1;
            if guard > 10_000 {
                break;
            }
        }
    }
    let full = |k: u64| total.get(&k).is_some_and(|t| hit.get(&k) == Some(t));
    let mut groups: BTreeMap<Option<u64>, Vec<u64>> = BTreeMap::new();
    for &key in keys {
        let Some(t) = ctx.facts.rec(key) else {
            continue;
        };
        // Climb while the parent is entirely in the set.
        let mut best = t.module.filter(|&m| full(m));
        let mut guard = 0;
        while let Some(m) = best {
            match parent.get(&m).copied().flatten() {
                Some(p) if full(p) && guard < 10_000 => best = Some(p),
                _ => break,
            }
            guard += 1;
        }
        groups.entry(best.or(t.module)).or_default().push(key);
    }
    groups
        .into_iter()
        .map(|(module, keys)| Group { module, keys })
        .collect()
}

/// A set of parameters in words: "`backbone`, `neck` (12 parameters)" when whole modules hold
/// them, else their names.
pub struct Described<'a> {
    pub what: String,
    /// The largest modules each wholly in the set (see [`group_by_module`]).
    pub modules: Vec<&'a ModuleRec>,
    pub names: Vec<String>,
}

pub fn describe<'a>(ctx: &'a Context, keys: &[u64]) -> Described<'a> {
    let groups = group_by_module(ctx, keys);
    let modules: Vec<&ModuleRec> = groups
        .iter()
        .filter_map(|g| g.module.and_then(|m| ctx.capture.module(m)))
        .collect();
    let names = names(ctx, keys);
    if modules.len() != groups.len() || modules.is_empty() {
        return Described {
            what: name_list(&names),
            modules,
            names,
        };
    }
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
    Described {
        what: format!(
            "{}{more} ({})",
            shown.join(", "),
            plural(names.len(), "parameter")
        ),
        modules,
        names,
    }
}

/// The model (root module) a tensor belongs to.
pub fn model_of(ctx: &Context, t: &TensorRec) -> Option<u64> {
    t.module
        .and_then(|m| ctx.capture.module(m))
        .and_then(|m| m.root)
}

/// Names of tensors, in capture order.
pub fn names(ctx: &Context, keys: &[u64]) -> Vec<String> {
    keys.iter()
        .filter_map(|k| ctx.facts.rec(*k))
        .map(|t| t.name.clone())
        .collect()
}

/// "`fc.weight`, `fc.bias`" (at most 4 named, then "and N more").
pub fn name_list(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(4).map(|n| format!("`{n}`")).collect();
    let mut s = shown.join(", ");
    if names.len() > 4 {
        s.push_str(&format!(" and {} more", names.len() - 4));
    }
    s
}

pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Per node of the op-level graph, the nodes it passes gradient to (its inputs' nodes).
pub fn graph_inputs(graph: &gradsleuth_model::capture::GraphRec) -> Vec<Vec<u32>> {
    let mut inputs: Vec<Vec<u32>> = vec![Vec::new(); graph.nodes.len()];
    for &(from, to) in &graph.edges {
        if let Some(v) = inputs.get_mut(from as usize) {
            v.push(to);
        }
    }
    inputs
}

/// PEFT's package: its freezes state the training's intent (its adapter config), its layers
/// hold the adapters.
pub const PEFT: &str = "peft";

/// The PEFT layer holding `t` as one of an adapter's own weights, if it is one: PEFT keeps
/// each adapter's weights in containers keyed by the adapter's name inside its layers
/// (`query.lora_A.default`, `classifier.modules_to_save.default`), which is what it trains and
/// saves; the base layer and a `modules_to_save` original sit in PEFT's layer directly.
pub fn adapter_layer<'a>(ctx: &'a Context, t: &TensorRec) -> Option<&'a ModuleRec> {
    let mut m = t.module.and_then(|k| ctx.capture.module(k));
    for _ in 0..64 {
        let cur = m?;
        let parent = cur.parent.and_then(|k| ctx.capture.module(k));
        let peft_parent = parent.filter(|p| is_peft_class(p));
        if peft_parent.is_some() && matches!(cur.class.as_str(), "ModuleDict" | "ParameterDict") {
            return peft_parent;
        }
        m = parent;
    }
    None
}

/// A module of a class PEFT defines (one of its layers or wrappers).
pub fn is_peft_class(m: &ModuleRec) -> bool {
    m.class_def
        .as_ref()
        .is_some_and(|l| gradsleuth_model::package_of(&l.file) == Some(PEFT))
}

/// Code of an installed package, not the user's.
pub fn is_library(file: &str) -> bool {
    gradsleuth_model::package_of(file).is_some()
}

/// The module's display name: its qualified name, or its class for a root.
pub fn module_name(m: &ModuleRec) -> String {
    if m.name.is_empty() {
        m.class.clone()
    } else {
        m.name.clone()
    }
}

/// The attribute's top-level name: `heads` for `heads[1]`, `layers` for `layers.0`.
pub fn top_attr(attr: &str) -> &str {
    attr.split(['[', '.']).next().unwrap_or(attr)
}

/// Where a module was assigned in its parent's class (`self.fc = nn.Linear(...)`).
pub fn module_assignment(ctx: &Context, m: &ModuleRec) -> Option<Location> {
    if let Some(l) = &m.assigned_at {
        return ctx.locate(Some(l));
    }
    let parent = ctx.capture.module(m.parent?)?;
    attr_assignment(ctx, parent, top_attr(&m.attr))
}

/// Where a tensor was assigned in its owner's class.
pub fn tensor_assignment(ctx: &Context, t: &TensorRec) -> Option<Location> {
    if let Some(l) = &t.assigned_at {
        return ctx.locate(Some(l));
    }
    let owner = ctx.capture.module(t.module?)?;
    attr_assignment(ctx, owner, top_attr(&t.attr))
}

/// `self.<attr> = ...` inside the class of `owner`.
pub fn attr_assignment(ctx: &Context, owner: &ModuleRec, attr: &str) -> Option<Location> {
    let def = owner.class_def.as_ref()?;
    let mut src = ctx.source.borrow_mut();
    let mut loc = src.attribute_assignment(&def.file, def.line, attr)?;
    loc.function = Some(format!("{}.__init__", owner.class));
    Some(loc)
}

/// The visible, trainable parameters of the capture that a check may talk about.
pub fn trainable_params<'a>(
    ctx: &'a Context<'_>,
) -> impl Iterator<Item = (&'a TensorRec, &'a crate::facts::TensorFacts)> {
    ctx.facts
        .iter()
        .filter(|(t, f)| f.visible && t.kind == TensorKind::Param && t.requires_grad && t.is_leaf)
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_documented() {
        let mut seen = HashSet::new();
        for c in ALL {
            assert!(seen.insert(c.code), "duplicate code {}", c.code);
            let rule = gradsleuth_rules::rule(c.code)
                .unwrap_or_else(|| panic!("{} is not in the rule registry", c.code));
            assert_ne!(
                rule.surface(),
                gradsleuth_rules::Surface::Lint,
                "{}",
                c.code
            );
        }
        // Every runtime code in the registry is a check here or a merge finding.
        for r in gradsleuth_rules::rules() {
            use gradsleuth_rules::Surface;
            if matches!(r.surface(), Surface::Run | Surface::Watch) {
                assert!(by_code(r.code()).is_some(), "{} has no check", r.code());
            }
        }
        assert!(by_code("GS103").is_some());
    }

    #[test]
    fn attribute_roots() {
        assert_eq!(top_attr("heads[1]"), "heads");
        assert_eq!(top_attr("layers.0"), "layers");
        assert_eq!(top_attr("fc"), "fc");
        assert_eq!(name_list(&["a".into(), "b".into()]), "`a`, `b`");
        assert!(
            name_list(&(0..6).map(|i| i.to_string()).collect::<Vec<_>>()).ends_with("and 2 more")
        );
    }
}
