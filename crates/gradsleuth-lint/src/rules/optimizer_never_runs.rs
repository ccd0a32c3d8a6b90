//! GS331: an optimizer built from a module that never runs. The module is made in the file
//! (`base = Net()`), handed to an optimizer (`SGD(base.parameters())`), and then nothing calls
//! it or hands it on: the script trains another module (often `copy.deepcopy(base)`, a copy
//! with parameters of its own), so the optimizer steps parameters that never get a gradient.
//!
//! Quiet as soon as the name is used in any other way than `.parameters()`-like methods,
//! mode switches and moves (`.train()`, `.to(device)`) and being copied: called, passed to a
//! function or a constructor (`DDP(model)`, `Trainer(model=model)`), stored, returned.

use std::collections::HashMap;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, ExprCall, ModModule, Stmt};

use super::optimizer_before_replace::{flatten, is_optimizer_call, parameter_owners};
use super::Rule;
use crate::checker::{call_name, dotted, Checker};

pub const RULE: Rule = Rule { code: "GS331" };

/// Methods whose call on a module neither runs it nor hands it to anyone.
const INERT: &[&str] = &[
    "parameters",
    "named_parameters",
    "train",
    "eval",
    "to",
    "cuda",
    "cpu",
    "float",
    "half",
    "double",
    "bfloat16",
    "zero_grad",
    "requires_grad_",
    "state_dict",
    "share_memory",
];

/// How a name is used in a part of the file.
#[derive(Default)]
struct Uses<'n> {
    name: &'n str,
    /// Used in a way that may run it (called, passed on, stored, returned).
    live: bool,
    /// `copy.deepcopy(name)`.
    copied: bool,
}

impl<'a> Visitor<'a> for Uses<'_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        match e {
            Expr::Call(c) if self.inert(c) => {
                for a in &c.arguments.args {
                    self.visit_expr(a);
                }
                for k in &c.arguments.keywords {
                    self.visit_expr(&k.value);
                }
            }
            Expr::Call(c)
                if call_name(e).is_some_and(|n| n == "copy.deepcopy" || n == "deepcopy")
                    && matches!(c.arguments.args.first(), Some(Expr::Name(n)) if n.id.as_str() == self.name) =>
            {
                self.copied = true;
            }
            Expr::Name(n) if n.id.as_str() == self.name && n.ctx.is_load() => self.live = true,
            _ => visitor::walk_expr(self, e),
        }
    }

    fn visit_stmt(&mut self, s: &'a Stmt) {
        // `del name` and `global name` neither run nor hand on.
        if !matches!(s, Stmt::Delete(_) | Stmt::Global(_)) {
            visitor::walk_stmt(self, s);
        }
    }
}

impl Uses<'_> {
    fn inert(&self, c: &ExprCall) -> bool {
        matches!(c.func.as_ref(), Expr::Attribute(a)
            if INERT.contains(&a.attr.id.as_str())
                && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == self.name))
    }
}

/// The optimizer calls among `stmts` (anywhere in their expressions).
fn optimizer_calls<'a>(stmts: &[&'a Stmt]) -> Vec<&'a ExprCall> {
    struct V<'a>(Vec<&'a ExprCall>);
    impl<'a> Visitor<'a> for V<'a> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if !matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
                visitor::walk_stmt(self, s);
            }
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Call(c) = e {
                if is_optimizer_call(e) {
                    self.0.push(c);
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut v = V(Vec::new());
    for s in stmts {
        // Only the statement itself: nested blocks are in `stmts` already.
        match s {
            Stmt::Expr(_) | Stmt::Assign(_) | Stmt::AnnAssign(_) | Stmt::AugAssign(_) => {
                v.visit_stmt(s)
            }
            _ => {}
        }
    }
    v.0
}

/// The file calls `backward()` somewhere (a training script, not a library of models).
fn trains(module: &ModModule) -> bool {
    struct V(bool);
    impl<'a> Visitor<'a> for V {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Call(c) = e {
                if let Expr::Attribute(a) = c.func.as_ref() {
                    if matches!(a.attr.id.as_str(), "backward" | "manual_backward") {
                        self.0 = true;
                    }
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut v = V(false);
    v.visit_body(&module.body);
    v.0
}

fn check_scope(ck: &mut Checker, body: &[Stmt], search: &[Stmt]) {
    let mut stmts = Vec::new();
    flatten(body, &mut stmts);
    // Names bound in this scope, and how often; those bound once to a module construction.
    let mut bound: HashMap<&str, (usize, bool)> = HashMap::new();
    for s in &stmts {
        let targets: Vec<&Expr> = match s {
            Stmt::Assign(a) => a.targets.iter().collect(),
            Stmt::AnnAssign(a) => vec![a.target.as_ref()],
            Stmt::AugAssign(a) => vec![a.target.as_ref()],
            Stmt::For(f) => vec![f.target.as_ref()],
            Stmt::With(w) => w
                .items
                .iter()
                .filter_map(|i| i.optional_vars.as_deref())
                .collect(),
            _ => continue,
        };
        let module = match s {
            Stmt::Assign(a) => ck.constructs_module(&a.value),
            _ => false,
        };
        for t in targets {
            let mut names = Vec::new();
            crate::checker::bound_names(t, &mut names);
            let single = matches!(t, Expr::Name(_));
            for n in names {
                let e = bound.entry(n).or_insert((0, false));
                e.0 += 1;
                e.1 = module && single;
            }
        }
    }
    for call in optimizer_calls(&stmts) {
        let mut owners = Vec::new();
        for a in &call.arguments.args {
            parameter_owners(a, &mut owners);
        }
        for k in &call.arguments.keywords {
            parameter_owners(&k.value, &mut owners);
        }
        for owner in owners {
            if bound.get(owner.as_str()) != Some(&(1, true)) {
                continue;
            }
            let mut uses = Uses {
                name: &owner,
                ..Uses::default()
            };
            uses.visit_body(search);
            if uses.live {
                continue;
            }
            let opt = dotted(&call.func)
                .map(|n| n.rsplit('.').next().unwrap_or(&n).to_owned())
                .unwrap_or_else(|| "the optimizer".into());
            let how = if uses.copied {
                format!(
                    "the script trains `copy.deepcopy({owner})`, a copy with parameters of its own"
                )
            } else {
                "nothing calls it or hands it on".to_owned()
            };
            let loc = ck.location(call);
            ck.report(
                RULE.finding(format!("`{opt}` is built from the parameters of `{owner}`, which never runs ({how}): the optimizer steps parameters that never get a gradient, and what the loss is computed from is never updated."))
                    .at(Some(loc))
                    .fix("Build the optimizer from the module the loss is computed from, after any copy (`model = copy.deepcopy(base)` first, then `torch.optim.SGD(model.parameters(), ...)`)."),
            );
        }
    }
}

pub fn check(ck: &mut Checker, module: &ModModule) {
    if !trains(module) {
        return;
    }
    // Module level: its names are globals, used anywhere in the file.
    check_scope(ck, &module.body, &module.body);
    for s in &module.body {
        if let Stmt::FunctionDef(f) = s {
            // A function's own names (a `global` one is the module's, and counted there).
            let globals = f.body.iter().any(|s| matches!(s, Stmt::Global(_)));
            if !globals {
                check_scope(ck, &f.body, &f.body);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_an_optimizer_over_a_module_that_a_copy_replaces() {
        let src = "import copy\nimport torch\nimport torch.nn as nn\nbase = nn.Linear(6, 2)\nopt = torch.optim.SGD(base.parameters(), lr=0.1)\nmodel = copy.deepcopy(base)\nfor x, y in data:\n    loss = nn.functional.cross_entropy(model(x), y)\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS331".into(), 5)]);
        let found = crate::lint_source("t.py", src).unwrap();
        assert!(found[0].message.contains("trains `copy.deepcopy(base)`"));
    }

    #[test]
    fn flags_an_optimizer_over_a_module_nothing_runs_in_a_function() {
        let src = "import torch\nimport torch.nn as nn\n\ndef main():\n    a = nn.Linear(6, 2)\n    b = nn.Linear(6, 2)\n    a.train()\n    opt = torch.optim.Adam(a.parameters())\n    for x, y in data:\n        loss = nn.functional.cross_entropy(b(x), y)\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n";
        assert_eq!(codes(src), vec![("GS331".into(), 8)]);
    }

    #[test]
    fn a_module_that_runs_or_is_handed_on_is_fine() {
        let base = "import torch\nimport torch.nn as nn\nmodel = nn.Linear(6, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n";
        for tail in [
            // called, directly or by a function of the file that reads the global
            "for x in data:\n    model(x).sum().backward()\n    opt.step()\n",
            "def step(x):\n    return model(x).sum()\nfor x in data:\n    step(x).backward()\n",
            // handed on: wrapped, passed to a trainer, put in a container
            "net = torch.nn.parallel.DistributedDataParallel(model)\nnet(x).sum().backward()\n",
            "train(model, opt)\nloss.backward()\n",
            "models = [model]\nloss.backward()\n",
            // reassigned: another rule's (the optimizer holds the old one)
            "model = nn.Linear(6, 3)\nmodel(x).sum().backward()\n",
        ] {
            assert!(codes(&format!("{base}{tail}")).is_empty(), "{tail}");
        }
        // No backward in the file: a module library, not a training script.
        assert!(codes(base).is_empty());
    }
}
