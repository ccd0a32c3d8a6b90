//! GS110 `recreated_weights`: a module built inside `forward`, so its weights are new every call.

use gradsleuth_model::capture::{ModuleKind, TensorKind};
use gradsleuth_model::{Finding, Location, Severity};
use gradsleuth_source::constructs;

use super::{module_name, plural, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS110", run };

/// The line constructing `class`, searching up from the call line to the enclosing `def`.
fn construction_line(ctx: &Context, call: &Location, class: &str) -> Option<Location> {
    let mut src = ctx.source.borrow_mut();
    let lines = src.lines(&call.file)?.to_vec();
    let call_idx = (call.line as usize).checked_sub(1)?;
    let mut i = call_idx.min(lines.len().checked_sub(1)?);
    loop {
        let l = gradsleuth_source::strip_comment(&lines[i]);
        if constructs(l, class) {
            let mut loc = src.location(&call.file, i as u32 + 1);
            loc.function = call.function.clone();
            return Some(loc);
        }
        let t = l.trim_start();
        if t.starts_with("def ") || t.starts_with("async def ") || i == 0 || call_idx - i > 200 {
            return None;
        }
        i -= 1;
    }
}

fn run(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for m in ctx
        .capture
        .modules
        .iter()
        .filter(|m| m.kind == ModuleKind::Orphan)
    {
        let keys: Vec<u64> = ctx
            .facts
            .iter()
            .filter(|(t, _)| t.kind == TensorKind::Orphan && t.module == Some(m.key))
            .map(|(t, _)| t.key)
            .collect();
        if keys.is_empty() {
            continue;
        }
        let names = super::names(ctx, &keys);
        let loc = m
            .first_call
            .as_ref()
            .and_then(|c| construction_line(ctx, c, &m.class))
            .or_else(|| ctx.locate(m.first_call.as_ref()));
        let inside = m
            .parent
            .and_then(|p| ctx.capture.module(p))
            .map(|p| format!("`{}.forward`", p.class))
            .unwrap_or_else(|| "forward".into());
        let times = if m.instances > 1 {
            format!(" ({} fresh copies in the observed calls)", m.instances)
        } else {
            String::new()
        };
        ctx.claim(keys.iter().copied());
        // The registered layer it stands in for: the one sibling of its class on the same
        // module that never ran (`return nn.Linear(...)(h)` where `self.head(h)` was meant),
        // and whose weights nothing else reaches: a layer whose weights the parent uses
        // functionally (BEiT's `F.linear(x, self.qkv.weight, ...)`) never runs as a module
        // either, yet it is not the one bypassed.
        let idle = |key: u64| {
            let mut own = ctx
                .facts
                .iter()
                .filter(|(t, _)| t.module == Some(key))
                .peekable();
            own.peek().is_some() && own.all(|(_, f)| !f.learns() && !f.reached())
        };
        let siblings: Vec<_> = ctx
            .capture
            .modules
            .iter()
            .filter(|s| {
                m.parent.is_some()
                    && s.parent == m.parent
                    && s.class == m.class
                    && s.kind != ModuleKind::Orphan
                    && s.runs == 0
                    && idle(s.key)
            })
            .collect();
        if let [registered] = siblings.as_slice() {
            // Every instance of the parent's class runs the same forward: the same registered
            // layer is bypassed in each (every attention layer of an encoder).
            let parent_class = m
                .parent
                .and_then(|p| ctx.capture.module(p))
                .map(|p| p.class.as_str());
            let bypassed: Vec<u64> = ctx
                .capture
                .modules
                .iter()
                .filter(|s| {
                    s.class == registered.class
                        && s.attr == registered.attr
                        && s.kind != ModuleKind::Orphan
                        && s.runs == 0
                        && s.parent
                            .and_then(|p| ctx.capture.module(p))
                            .map(|p| p.class.as_str())
                            == parent_class
                })
                .map(|s| s.key)
                .collect();
            let own: Vec<u64> = ctx
                .facts
                .iter()
                .filter(|(t, f)| {
                    t.module.is_some_and(|k| bypassed.contains(&k)) && !f.learns() && !f.reached()
                })
                .map(|(t, _)| t.key)
                .collect();
            if !own.is_empty() {
                ctx.claim(own.iter().copied());
                let own_names = super::names(ctx, &own);
                out.push(
                    CHECK.finding(Severity::Error,
                        format!(
                            "A new `{}` is constructed inside {inside} instead of calling the registered `{}`: {} never runs, so its {} never learn, and the copy used in its place is re-initialised on every call{times} with no optimizer holding it.",
                            m.class,
                            module_name(registered),
                            if bypassed.len() > 1 {
                                format!("`self.{}` (in each of the {} instances)", registered.attr, bypassed.len())
                            } else {
                                format!("`{}`", module_name(registered))
                            },
                            plural(own.len(), "parameter")
                        ),
                    )
                    .params(own_names)
                    .at(loc)
                    .related(super::module_assignment(ctx, registered), "the registered layer it should call")
                    .chain([
                        format!("{inside} builds a fresh `{}`", m.class),
                        format!("`{}` is never called ✗", module_name(registered)),
                    ])
                    .fix(format!("Call `self.{}(...)` in forward instead of constructing a new `{}`.", registered.attr, m.class)),
                );
                continue;
            }
        }
        out.push(
            CHECK.finding(Severity::Error,
                format!(
                    "A `{}` is constructed inside {inside}: its {} are re-initialised on every call{times} and no optimizer ever holds them.",
                    m.class,
                    plural(keys.len(), "parameter")
                ),
            )
            .params(names)
            .at(loc)
            .chain([
                format!("{inside} builds `{}` ({})", m.class, module_name(m)),
                "new random weights each call".into(),
                "optimizer was built before: never sees them ✗".into(),
            ])
            .fix(format!(
                "Create it once in `__init__` (`self.{} = nn.{}(...)`) and only call it in forward.",
                m.class.to_lowercase(),
                m.class
            )),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn points_at_the_construction_line() {
        let mut s = healthy(2);
        let file = s.source("class Net(nn.Module):\n    def forward(self, x):\n        h = self.fc(x)\n        proj = nn.Linear(4, 4)\n        return proj(h)\n");
        let m = s.module(5, "Linear", "Linear", Some(1), ModuleKind::Orphan, 2);
        m.first_call = Some(Location {
            function: Some("forward".into()),
            ..Location::new(file, 5)
        });
        m.instances = 2;
        s.tensor(30, "<forward>.Linear.weight", 5, TensorKind::Orphan);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].location.as_ref().unwrap().line, 4);
        assert!(f[0].message.contains("2 fresh copies"));
    }

    #[test]
    fn a_rebuild_in_place_of_a_registered_layer_names_that_layer() {
        let mut s = healthy(2);
        let file = s.source("class Net(nn.Module):\n    def __init__(self):\n        self.head = nn.Linear(4, 4)\n    def forward(self, x):\n        return nn.Linear(4, 4)(x)\n");
        s.module(6, "Linear", "head", Some(1), ModuleKind::Registered, 0);
        s.param(40, "head.weight", 6);
        s.param(41, "head.bias", 6);
        let m = s.module(5, "Linear", "Linear", Some(1), ModuleKind::Orphan, 2);
        m.first_call = Some(Location {
            function: Some("forward".into()),
            ..Location::new(file, 5)
        });
        s.tensor(30, "<forward>.Linear.weight", 5, TensorKind::Orphan);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].params, vec!["head.weight", "head.bias"]);
        assert_eq!(f[0].location.as_ref().unwrap().line, 5);
        assert!(
            f[0].message
                .contains("instead of calling the registered `head`"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_sibling_used_functionally_is_not_the_bypassed_layer() {
        // BEiT's attention: `F.linear(x, self.qkv.weight, ...)` never runs `qkv` as a module,
        // but its weight learns; `proj`, bypassed by a fresh Linear, is the one named.
        let mut s = healthy(2);
        let file = s.source("class Attn(nn.Module):\n    def __init__(self):\n        self.qkv = nn.Linear(4, 12)\n        self.proj = nn.Linear(4, 4)\n    def forward(self, x):\n        return nn.Linear(4, 4)(F.linear(x, self.qkv.weight))\n");
        s.module(6, "Linear", "proj", Some(1), ModuleKind::Registered, 0);
        s.param(40, "proj.weight", 6);
        s.module(7, "Linear", "qkv", Some(1), ModuleKind::Registered, 0);
        s.param(42, "qkv.weight", 7);
        s.optimizer(101, &[40, 42], None);
        s.backward(&[42], &[(42, Some(1.0))]);
        s.step(101, &[(40, None, 1.0, 1.0), (42, Some(1.0), 1.0, 1.1)]);
        let m = s.module(5, "Linear", "Linear", Some(1), ModuleKind::Orphan, 2);
        m.first_call = Some(Location {
            function: Some("forward".into()),
            ..Location::new(file, 6)
        });
        s.tensor(30, "<forward>.Linear.weight", 5, TensorKind::Orphan);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].params, vec!["proj.weight"]);
    }

    #[test]
    fn registered_modules_are_fine() {
        assert!(healthy(2).run(&CHECK).is_empty());
    }
}
