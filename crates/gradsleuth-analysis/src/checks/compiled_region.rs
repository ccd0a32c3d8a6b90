//! GS191 `compiled_region`: modules wrapped by `torch.compile` are seen as a whole (their
//! parameters, whether they ran) but their inner ops are not instrumented at op level.

use gradsleuth_model::{Finding, Severity};

use super::{module_name, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS191", run };

fn run(ctx: &Context) -> Vec<Finding> {
    // One finding for every compiled region: each `torch.compile(model)` call makes a new
    // wrapper, and a script that compiles the same model twice has one cause to tell.
    let wrappers: Vec<_> = ctx
        .capture
        .modules
        .iter()
        .filter(|m| m.class == "OptimizedModule")
        .collect();
    let mut names: Vec<String> = Vec::new();
    for m in &wrappers {
        let name = module_name(m);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Vec::new();
    }
    let listed = names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
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
    fn plain_modules_are_not() {
        assert!(healthy(1).run(&CHECK).is_empty());
    }
}
