//! GS301: modules kept in a plain list/dict/tuple attribute of an `nn.Module`.

use ruff_python_ast::{Expr, StmtAssign};

use super::Rule;
use crate::checker::{dotted, Checker};

pub const RULE: Rule = Rule { code: "GS301" };

/// `torch.randn(..., requires_grad=True)`, `torch.zeros(...).requires_grad_()`: the call that
/// makes the tensor.
fn tensor_requiring_grad(e: &Expr) -> Option<&Expr> {
    let Expr::Call(c) = e else { return None };
    if let Expr::Attribute(a) = c.func.as_ref() {
        if a.attr.id.as_str() == "requires_grad_"
            && !matches!(c.arguments.args.first(), Some(Expr::BooleanLiteral(b)) if !b.value)
            && crate::checker::call_name(&a.value).is_some_and(|n| n.starts_with("torch."))
        {
            return Some(&a.value);
        }
    }
    let name = crate::checker::call_name(e)?;
    let flag = c.arguments.keywords.iter().any(|k| {
        k.arg
            .as_ref()
            .is_some_and(|n| n.id.as_str() == "requires_grad")
            && matches!(&k.value, Expr::BooleanLiteral(b) if b.value)
    });
    (flag && name.starts_with("torch.") && !name.ends_with("Parameter")).then_some(e)
}

pub fn check(ck: &mut Checker, a: &StmtAssign) {
    if !ck.in_module_class() {
        return;
    }
    let [target] = a.targets.as_slice() else {
        return;
    };
    let Some(name) = dotted(target) else { return };
    let Some(attr) = name.strip_prefix("self.") else {
        return;
    };
    if let Some(factory) = tensor_requiring_grad(a.value.as_ref()) {
        let loc = ck.location(a);
        let value = &ck.source[ruff_text_size::Ranged::range(factory).start().to_usize()
            ..ruff_text_size::Ranged::range(factory).end().to_usize()];
        let value = value
            .replace(", requires_grad=True", "")
            .replace(".requires_grad_()", "");
        let finding = RULE
            .finding(format!("`self.{attr}` is a tensor with requires_grad=True, not an nn.Parameter: `model.parameters()` skips it, so no optimizer built from it updates it."))
            .at(Some(loc))
            .fix(format!("self.{attr} = nn.Parameter({value})"));
        match ck.nn_prefix.clone() {
            Some(nn) => ck.report_with_edit(
                finding,
                ruff_text_size::Ranged::range(a.value.as_ref()),
                format!("{nn}.Parameter({value})"),
            ),
            None => ck.report(finding),
        }
        return;
    }
    let (holds_modules, wrapper) = match a.value.as_ref() {
        Expr::List(l) => (
            l.elts.iter().any(|e| ck.constructs_module(e)),
            "nn.ModuleList",
        ),
        Expr::Tuple(t) => (
            t.elts.iter().any(|e| ck.constructs_module(e)),
            "nn.ModuleList",
        ),
        Expr::ListComp(c) => (ck.constructs_module(&c.elt), "nn.ModuleList"),
        Expr::Dict(d) => (
            d.items.iter().any(|i| ck.constructs_module(&i.value)),
            "nn.ModuleDict",
        ),
        Expr::DictComp(c) => (ck.constructs_module(&c.value), "nn.ModuleDict"),
        // `tuple(Block(i) for i in ...)`, `list(...)`, `dict(...)`
        Expr::Call(c) => {
            let builtin = crate::checker::call_name(a.value.as_ref()).unwrap_or_default();
            let holds = c.arguments.args.first().is_some_and(|arg| match arg {
                Expr::Generator(g) => ck.constructs_module(&g.elt),
                Expr::List(l) => l.elts.iter().any(|e| ck.constructs_module(e)),
                _ => false,
            });
            match builtin.as_str() {
                "tuple" | "list" => (holds, "nn.ModuleList"),
                _ => (false, ""),
            }
        }
        _ => (false, ""),
    };
    if !holds_modules {
        return;
    }
    let loc = ck.location(a);
    let value = &ck.source[ruff_text_size::Ranged::range(a.value.as_ref())
        .start()
        .to_usize()
        ..ruff_text_size::Ranged::range(a.value.as_ref())
            .end()
            .to_usize()];
    let f = RULE
        .finding(format!("`self.{attr}` holds modules in a plain container: they are not registered, so no optimizer built from `model.parameters()` updates them."))
        .at(Some(loc))
        .fix(format!("self.{attr} = {wrapper}({value})"));
    match ck.nn_prefix.clone() {
        Some(nn) => {
            let wrapper = wrapper.replacen("nn", &nn, 1);
            let content = format!("{wrapper}({value})");
            ck.report_with_edit(f, ruff_text_size::Ranged::range(a.value.as_ref()), content);
        }
        None => ck.report(f),
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_lists_and_dicts_of_modules() {
        let src = "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.heads = [nn.Linear(4, 2) for _ in range(3)]\n        self.experts = {'a': nn.Linear(2, 2)}\n        self.stages = tuple(nn.Conv1d(4, 4, 3) for _ in range(2))\n";
        assert_eq!(
            codes(src),
            vec![
                ("GS301".into(), 5),
                ("GS301".into(), 6),
                ("GS301".into(), 7)
            ]
        );
    }

    #[test]
    fn flags_tensors_meant_to_learn_and_factory_built_experts() {
        let src = "import torch\nimport torch.nn as nn\n\ndef mlp(d):\n    return nn.Sequential(nn.Linear(d, d), nn.SiLU())\n\nclass M(nn.Module):\n    def __init__(self, names):\n        super().__init__()\n        self.logit_scale = torch.tensor(2.6, requires_grad=True)\n        self.bias = torch.zeros(4).requires_grad_()\n        self.experts = {n: mlp(4) for n in names}\n";
        let found = crate::lint_source("t.py", src).unwrap();
        let lines: Vec<u32> = found
            .iter()
            .map(|f| f.location.as_ref().unwrap().line)
            .collect();
        assert_eq!(lines, vec![10, 11, 12]);
        assert_eq!(
            found[0].fix.as_deref(),
            Some("self.logit_scale = nn.Parameter(torch.tensor(2.6))")
        );
        assert_eq!(
            found[2].fix.as_deref(),
            Some("self.experts = nn.ModuleDict({n: mlp(4) for n in names})")
        );
    }

    #[test]
    fn module_lists_and_plain_data_are_fine() {
        let src = "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.scale = nn.Parameter(torch.ones(1, requires_grad=True))\n        self.mask = torch.zeros(4)\n        self.heads = nn.ModuleList([nn.Linear(4, 2)])\n        self.sizes = [4, 8]\n        self.acts = [nn.functional.relu]\nclass NotAModule:\n    def __init__(self):\n        self.layers = [nn.Linear(2, 2)]\n";
        assert!(codes(src).is_empty());
    }
}
