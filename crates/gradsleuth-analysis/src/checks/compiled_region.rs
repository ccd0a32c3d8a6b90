//! GS191 `compiled_region`: modules wrapped by `torch.compile` are seen as a whole (their
//! parameters, whether they ran) but their inner ops are not instrumented at op level.

use gradsleuth_model::{Finding, Severity};

use super::{module_name, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS191", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let mut out = compiled(ctx);
    out.extend(scripted(ctx));
    out
}

/// TorchScript modules (outermost ones) that ran: their ops are compiled code, unseen.
fn scripted(ctx: &Context) -> Vec<Finding> {
    let is_script = |m: &gradsleuth_model::capture::ModuleRec| {
        super::SCRIPT_CLASSES.contains(&m.class.as_str())
    };
    let tops = ctx.capture.modules.iter().filter(|m| {
        let parent_scripted = m
            .parent
            .and_then(|p| ctx.capture.module(p))
            .is_some_and(is_script);
        // Told only where it hides something: a parameter inside that does not learn.
        let hides = || {
            ctx.capture.tensors.iter().any(|t| {
                t.module
                    .is_some_and(|k| super::lineage(ctx, k).any(|c| c.key == m.key))
                    && ctx
                        .facts
                        .get(t.key)
                        .is_some_and(|f| f.visible && !f.learns())
            })
        };
        is_script(m) && !parent_scripted && m.runs > 0 && hides()
    });
    let names = distinct_names(tops);
    if names.is_empty() {
        return Vec::new();
    }
    let (verb, region) = if names.len() == 1 {
        ("is a TorchScript module", "its ops run as compiled code")
    } else {
        ("are TorchScript modules", "their ops run as compiled code")
    };
    vec![CHECK.finding(
        Severity::Info,
        format!("{} {verb} (`torch.jit.script`/`trace`): {region}, which gradsleuth does not instrument (a cut inside is not located to its line; the modules inside are not told as unused).", listed(&names)),
    )]
}

/// The modules' names, each once, in order.
fn distinct_names<'c>(
    modules: impl Iterator<Item = &'c gradsleuth_model::capture::ModuleRec>,
) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for m in modules {
        let name = module_name(m);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// `a`, `b`, `c`.
fn listed(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn compiled(ctx: &Context) -> Vec<Finding> {
    // One finding for every compiled region: each `torch.compile(model)` call makes a new
    // wrapper, and a script that compiles the same model twice has one cause to tell.
    let wrappers: Vec<_> = ctx
        .capture
        .modules
        .iter()
        .filter(|m| m.class == "OptimizedModule")
        .collect();
    let names = distinct_names(wrappers.iter().copied());
    if names.is_empty() {
        return Vec::new();
    }
    let listed = listed(&names);
    let (verb, region) = if names.len() == 1 {
        ("is", "a compiled region")
    } else {
        ("are", "compiled regions")
    };
    let times = if wrappers.len() > names.len() {
        format!(" ({} torch.compile wrappers)", wrappers.len())
    } else {
        String::new()
    };
    vec![CHECK.finding(
        Severity::Info,
        format!(
            "{listed} {verb} compiled with torch.compile{times}: {region}, not instrumented at op level."
        ),
    )]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::ModuleKind;

    #[test]
    fn compiled_modules_are_named() {
        let mut s = healthy(1);
        s.module(
            7,
            "OptimizedModule",
            "block",
            Some(1),
            ModuleKind::Registered,
            1,
        );
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("`block`"));
    }

    #[test]
    fn one_finding_for_every_wrapper_of_the_compiled_models() {
        let mut s = healthy(1);
        for (key, name) in [(7, ""), (8, ""), (9, "head")] {
            s.module(
                key,
                "OptimizedModule",
                name,
                None,
                ModuleKind::Registered,
                1,
            );
        }
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].message.starts_with("`OptimizedModule`, `head` are compiled with torch.compile (3 torch.compile wrappers): compiled regions"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_scripted_module_is_a_region_and_its_children_are_not_unused() {
        let mut s = healthy(1);
        s.module(
            7,
            "RecursiveScriptModule",
            "enc",
            Some(1),
            ModuleKind::Registered,
            1,
        );
        s.module(
            8,
            "RecursiveScriptModule",
            "enc.l",
            Some(7),
            ModuleKind::Registered,
            0,
        );
        s.param(20, "enc.l.weight", 8);
        s.backward(&[10, 11], &[]);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].message.starts_with("`enc` is a TorchScript module"),
            "{}",
            f[0].message
        );
        let r = s.report();
        assert!(
            !r.findings.iter().any(|f| f.code == "GS102"),
            "{:?}",
            r.findings
        );
    }

    #[test]
    fn a_scripted_module_whose_parameters_learn_is_not_told() {
        let mut s = healthy(1);
        s.module(7, "RecursiveScriptModule", "", None, ModuleKind::Root, 1);
        assert!(s.run(&CHECK).is_empty());
    }

    #[test]
    fn plain_modules_are_not() {
        assert!(healthy(1).run(&CHECK).is_empty());
    }
}
