//! GS301: modules kept in a plain list/dict/tuple attribute of an `nn.Module`.

use gradsleuth_model::Category;
use ruff_python_ast::{Expr, StmtAssign};

use super::Rule;
use crate::checker::{dotted, Checker};

pub const RULE: Rule = Rule {
    code: "GS301",
    name: "unregistered-modules",
    category: Category::Unregistered,
    doc: "`self.heads = [nn.Linear(...) for ...]` (or a dict/tuple of modules) inside an \
          `nn.Module`: the modules are not registered, so `model.parameters()`, `state_dict()`, \
          `.to()` and the optimizer never see them. Use `nn.ModuleList` / `nn.ModuleDict`. \
          Legitimate only for modules deliberately kept out of the model (rare; say so with \
          `# noqa: GS301`).",
};

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
    ck.report(f);
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
    fn module_lists_and_plain_data_are_fine() {
        let src = "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.heads = nn.ModuleList([nn.Linear(4, 2)])\n        self.sizes = [4, 8]\n        self.acts = [nn.functional.relu]\nclass NotAModule:\n    def __init__(self):\n        self.layers = [nn.Linear(2, 2)]\n";
        assert!(codes(src).is_empty());
    }
}
