//! GS103 `unregistered`: modules or tensors kept in plain Python containers or attributes.

use std::collections::BTreeMap;

use gradsleuth_model::capture::TensorKind;
use gradsleuth_model::{Finding, Severity};

use super::{attr_assignment, module_name, name_list, plural, top_attr, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS103", run };

fn run(ctx: &Context) -> Vec<Finding> {
    // (owner module, top-level attribute) -> tensors; every instance of one class shares the
    // line that made the container: one finding for them all, located at the first.
    let mut groups: BTreeMap<(u64, String), Vec<u64>> = BTreeMap::new();
    let mut first_owner: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (t, f) in ctx.facts.iter() {
        let container = t.kind == TensorKind::Container && t.requires_grad;
        let attribute = t.kind == TensorKind::Attribute && t.requires_grad && t.is_leaf;
        if !(container || attribute) || !f.visible {
            continue;
        }
        let Some(owner) = t.module else { continue };
        let attr = top_attr(&t.attr).to_owned();
        let class = ctx
            .capture
            .module(owner)
            .map(|m| m.class.clone())
            .unwrap_or_default();
        let owner = *first_owner.entry((class, attr.clone())).or_insert(owner);
        groups.entry((owner, attr)).or_default().push(t.key);
    }
    let mut out = Vec::new();
    for ((owner, attr), keys) in groups {
        let Some(m) = ctx.capture.module(owner) else {
            continue;
        };
        let tensors: Vec<_> = keys.iter().filter_map(|k| ctx.facts.rec(*k)).collect();
        let facts: Vec<_> = keys.iter().filter_map(|k| ctx.facts.get(*k)).collect();
        let names: Vec<String> = tensors.iter().map(|t| t.name.clone()).collect();
        let optimized = facts.iter().all(|f| !f.optimizers.is_empty());
        let gets_grad = facts.iter().any(|f| f.reached() || f.grad_nonzero());
        let is_container = tensors.iter().any(|t| t.kind == TensorKind::Container);
        let modules_inside = ctx
            .capture
            .modules
            .iter()
            .filter(|c| {
                c.parent == Some(owner)
                    && top_attr(&c.attr) == attr
                    && c.kind == gradsleuth_model::capture::ModuleKind::Container
            })
            .count();
        let holder = if is_container {
            if modules_inside > 0 {
                format!(
                    "{} kept in the plain container `{}.{attr}`",
                    plural(modules_inside, "module"),
                    module_name(m)
                )
            } else {
                format!(
                    "tensors kept in the plain container `{}.{attr}`",
                    module_name(m)
                )
            }
        } else {
            format!("the plain tensor attribute `{}.{attr}`", module_name(m))
        };
        let consequence = if optimized {
            "they are optimized only because they were passed by hand; state_dict(), .to() and DDP do not see them"
        } else if gets_grad {
            "gradients reach them but no optimizer built from model.parameters() updates them"
        } else {
            "model.parameters() does not list them, so no optimizer updates them"
        };
        let fix = fix_for(ctx, &tensors, &attr, modules_inside > 0);
        ctx.claim(keys.iter().copied());
        out.push(
            CHECK
                .finding(
                    if optimized {
                        Severity::Warning
                    } else {
                        Severity::Error
                    },
                    format!(
                        "{} in {holder} {} not registered: {consequence}.",
                        plural(names.len(), "parameter"),
                        if names.len() == 1 { "is" } else { "are" }
                    ),
                )
                .params(names.clone())
                .at(attr_assignment(ctx, m, &attr))
                .chain([
                    format!("{} used in forward", name_list(&names)),
                    format!(
                        "gradient accumulates into .grad ({})",
                        if gets_grad {
                            "observed"
                        } else {
                            "not observed"
                        }
                    ),
                    "model.parameters() does not list them ✗".into(),
                    "the optimizer never updates them".into(),
                ])
                .fix(fix),
        );
    }
    out
}

fn fix_for(
    ctx: &Context,
    tensors: &[&gradsleuth_model::capture::TensorRec],
    attr: &str,
    modules: bool,
) -> String {
    // The whole assignment, however many lines it spans (a list written one layer per line).
    let line = tensors
        .first()
        .and_then(|t| t.module)
        .and_then(|m| ctx.capture.module(m))
        .and_then(|m| attr_assignment(ctx, m, attr))
        .and_then(|l| {
            ctx.source
                .borrow_mut()
                .statement(&l.file, l.line)
                .or(l.snippet)
        })
        .unwrap_or_default();
    let rhs = line.split_once('=').map(|(_, r)| r.trim()).unwrap_or("");
    let container = tensors.iter().any(|t| t.kind == TensorKind::Container);
    if !container {
        return format!(
            "Wrap it: `self.{attr} = nn.Parameter({})`.",
            if rhs.is_empty() { "..." } else { rhs }
        );
    }
    let is_dict = rhs.starts_with('{') || rhs.starts_with("dict(");
    let wrapper = match (modules, is_dict) {
        (true, true) => "nn.ModuleDict",
        (true, false) => "nn.ModuleList",
        (false, true) => "nn.ParameterDict",
        (false, false) => "nn.ParameterList",
    };
    if rhs.is_empty() {
        format!("Register the container: `self.{attr} = {wrapper}(...)`.")
    } else {
        format!("Register the container: `self.{attr} = {wrapper}({rhs})`.")
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::ModuleKind;

    fn with_heads(optimized: bool) -> Scenario {
        let mut s = healthy(2);
        let file = s.source("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n        self.heads = [nn.Linear(4, 2) for _ in range(3)]\n");
        s.capture.modules[0].class_def = Some(gradsleuth_model::Location::new(file, 1));
        s.module(3, "Linear", "heads[0]", Some(1), ModuleKind::Container, 2)
            .attr = "heads[0]".into();
        s.tensor(20, "heads.0.weight", 1, TensorKind::Container)
            .attr = "heads.0.weight".into();
        s.tensor(21, "heads.0.bias", 1, TensorKind::Container).attr = "heads.0.bias".into();
        s.capture.backwards[0].reached.extend([20, 21]);
        if optimized {
            s.capture.optimizers[0].params.extend([20, 21]);
        }
        s
    }

    #[test]
    fn a_list_of_modules_is_an_error_with_a_module_list_fix() {
        let f = with_heads(false).run(&CHECK);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Error);
        assert_eq!(f[0].params, vec!["heads.0.weight", "heads.0.bias"]);
        assert_eq!(f[0].location.as_ref().unwrap().line, 5);
        assert!(f[0]
            .fix
            .as_ref()
            .unwrap()
            .contains("nn.ModuleList([nn.Linear(4, 2) for _ in range(3)])"));
    }

    #[test]
    fn the_fix_of_a_list_written_over_several_lines_is_the_whole_list_wrapped() {
        let mut s = healthy(2);
        let file = s.source("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.convs = [nn.Conv2d(1, 32, 3, 1),\n                      nn.Conv2d(32, 64, 3, 1)]\n");
        s.capture.modules[0].class_def = Some(gradsleuth_model::Location::new(file, 1));
        s.module(3, "Conv2d", "convs[0]", Some(1), ModuleKind::Container, 2)
            .attr = "convs[0]".into();
        s.tensor(20, "convs.0.weight", 1, TensorKind::Container)
            .attr = "convs.0.weight".into();
        s.capture.backwards[0].reached.push(20);
        let f = s.run(&CHECK);
        assert!(
            f[0].message.starts_with(
                "1 parameter in 1 module kept in the plain container `Net.convs` is not registered"
            ),
            "{}",
            f[0].message
        );
        assert_eq!(
            f[0].fix.as_deref(),
            Some("Register the container: `self.convs = nn.ModuleList([nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)])`.")
        );
    }

    #[test]
    fn passed_by_hand_is_only_a_warning() {
        let f = with_heads(true).run(&CHECK);
        assert_eq!(f[0].severity, Severity::Warning);
    }

    #[test]
    fn registered_parameters_are_not_flagged() {
        assert!(healthy(2).run(&CHECK).is_empty());
    }
}
