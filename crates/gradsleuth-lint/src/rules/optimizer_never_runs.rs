//! GS331: an optimizer built from a module that never runs. The module is made in the file
//! (`base = Net()`), handed to an optimizer (`SGD(base.parameters())`), and then nothing calls
//! it or hands it on: the script trains another module (often `copy.deepcopy(base)`, a copy
//! with parameters of its own), so the optimizer steps parameters that never get a gradient.
//!
//! Quiet as soon as the name is used in any other way than `.parameters()`-like methods,
//! mode switches and moves as statements of their own (`model.train()`, `model.to(device)`;
//! `net = model.to(device)` hands it on) and being copied: called, passed to a function or a
//! constructor (`DDP(model)`, `Trainer(model=model)`), stored, returned. A function whose
//! parameter has the name reads its own, not the module's.
//!
//! Scopes: the module's names against the whole file; a function's own names against its
//! body; an optimizer a function builds over a global (`def train(): opt =
//! SGD(student.parameters())`), or over a parameter every call passes the same module for
//! (`train(student)`), against that module's uses in the whole file (the calls' arguments
//! aside); the methods that call `backward()` of a plain class of the file (a trainer of the
//! script's own) like functions. A model such a trainer only keeps (`crate::holders`) is no use
//! of it where its methods are in view.

use std::collections::HashMap;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, ExprCall, ModModule, Stmt, StmtFunctionDef};
use ruff_text_size::{Ranged, TextRange};

use super::optimizer_before_replace::{
    factory_owners, flatten, is_optimizer_call, parameter_owners,
};
use super::Rule;
use crate::checker::{call_name, dotted, Checker};
use crate::flow::param_names;

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
    /// Expressions not looked into.
    skip: &'n [TextRange],
    /// Used in a way that may run it (called, passed on, stored, returned).
    live: bool,
    /// `copy.deepcopy(name)`.
    copied: bool,
}

/// The inert methods that return the module itself: `net = model.to(device)` hands it on.
const RETURN_IT: &[&str] = &[
    "train",
    "eval",
    "to",
    "cuda",
    "cpu",
    "float",
    "half",
    "double",
    "bfloat16",
    "requires_grad_",
    "share_memory",
];

impl<'a> Visitor<'a> for Uses<'_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        if self.skip.contains(&e.range()) {
            return;
        }
        match e {
            Expr::Call(c) if self.inert(c) => {
                // (A statement of its own is handled in `visit_stmt`.)
                if matches!(c.func.as_ref(), Expr::Attribute(a) if RETURN_IT.contains(&a.attr.id.as_str()))
                {
                    self.live = true;
                }
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
        // `del name` and `global name` neither run nor hand on; a function whose parameter
        // has the name reads its own (a constructor's `def __init__(self, model)`).
        if let Stmt::FunctionDef(f) = s {
            if param_names(&f.parameters).iter().any(|p| p == self.name) {
                // (Its defaults and decorators are read where it is defined: `model=model`.)
                for d in &f.decorator_list {
                    self.visit_expr(&d.expression);
                }
                let p = &f.parameters;
                for a in p.posonlyargs.iter().chain(&p.args).chain(&p.kwonlyargs) {
                    if let Some(d) = &a.default {
                        self.visit_expr(d);
                    }
                }
                return;
            }
        }
        // `model.train()`, `model.to(device)` as statements: its value is not used.
        if let Stmt::Expr(x) = s {
            if let Expr::Call(c) = x.value.as_ref() {
                if self.inert(c) {
                    for a in &c.arguments.args {
                        self.visit_expr(a);
                    }
                    for k in &c.arguments.keywords {
                        self.visit_expr(&k.value);
                    }
                    return;
                }
            }
        }
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

/// The optimizer calls among `stmts` (anywhere in their expressions), each with the models it
/// is over and, for a call of the file's optimizer factory (`build_optimizer(model)`), the
/// arguments that hand them to it (no use of the models: the factory reads their parameters).
fn optimizer_calls<'a>(
    ck: &Checker,
    stmts: &[&'a Stmt],
) -> Vec<(&'a ExprCall, Vec<String>, Vec<TextRange>)> {
    struct V<'a, 'c, 'k>(
        &'c Checker<'k>,
        Vec<(&'a ExprCall, Vec<String>, Vec<TextRange>)>,
    );
    impl<'a> Visitor<'a> for V<'a, '_, '_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if !matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
                visitor::walk_stmt(self, s);
            }
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Call(c) = e {
                if is_optimizer_call(e) {
                    let mut owners = Vec::new();
                    for a in &c.arguments.args {
                        parameter_owners(a, &mut owners);
                    }
                    for k in &c.arguments.keywords {
                        parameter_owners(&k.value, &mut owners);
                    }
                    self.1.push((c, owners, Vec::new()));
                } else if let Some(owners) = factory_owners(self.0, e) {
                    let args = c
                        .arguments
                        .args
                        .iter()
                        .chain(c.arguments.keywords.iter().map(|k| &k.value))
                        .map(Ranged::range)
                        .collect();
                    self.1.push((c, owners, args));
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut v = V(ck, Vec::new());
    for s in stmts {
        // Only the statement itself: nested blocks are in `stmts` already.
        match s {
            Stmt::Expr(_) | Stmt::Assign(_) | Stmt::AnnAssign(_) | Stmt::AugAssign(_) => {
                v.visit_stmt(s)
            }
            _ => {}
        }
    }
    v.1
}

/// The file calls `backward()` somewhere (a training script, not a library of models).
fn trains(module: &ModModule) -> bool {
    calls_backward(&module.body)
}

/// `backward()` is called somewhere in `body`.
fn calls_backward(body: &[Stmt]) -> bool {
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
    v.visit_body(body);
    v.0
}

/// Names a scope binds, with how often, and whether once to a module construction.
fn bindings<'a>(ck: &Checker, stmts: &[&'a Stmt]) -> HashMap<&'a str, (usize, bool)> {
    let mut bound: HashMap<&str, (usize, bool)> = HashMap::new();
    for s in stmts {
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
    bound
}

/// A function's scope seen from the module: the module's names, its body, and the function.
struct Outer<'m, 'a> {
    bound: &'m HashMap<&'a str, (usize, bool)>,
    body: &'a [Stmt],
    function: &'a StmtFunctionDef,
}

/// How the module uses `name`, leaving out the arguments at `skip` (a call's argument that
/// binds a parameter, followed inside the function instead).
fn module_uses(ck: &Checker, name: &str, body: &[Stmt], skip: &[TextRange]) -> (bool, bool) {
    // (An argument a class only keeps, where the search covers the class's methods.)
    let kept = ck.inlined.iter().filter_map(|(arg, class)| {
        body.iter()
            .any(|s| s.range().contains_range(*class))
            .then_some(arg)
    });
    let skip: Vec<TextRange> = skip.iter().chain(kept).copied().collect();
    let mut uses = Uses {
        name,
        skip: &skip,
        ..Uses::default()
    };
    uses.visit_body(body);
    (uses.live, uses.copied)
}

fn check_scope(ck: &mut Checker, body: &[Stmt], search: &[Stmt], outer: Option<&Outer>) {
    let mut stmts = Vec::new();
    flatten(body, &mut stmts);
    let bound = bindings(ck, &stmts);
    let params: Vec<String> = outer.map_or_else(Vec::new, |o| param_names(&o.function.parameters));
    for (call, owners, handed) in optimizer_calls(ck, &stmts) {
        for owner in owners {
            let (live, copied) = if bound.get(owner.as_str()) == Some(&(1, true)) {
                module_uses(ck, &owner, search, &handed)
            } else if let Some(o) = outer.filter(|_| !bound.contains_key(owner.as_str())) {
                match params.iter().position(|p| *p == owner) {
                    // A global of the module (`student`, built at the top, used in `train()`).
                    None if o.bound.get(owner.as_str()) == Some(&(1, true)) => {
                        module_uses(ck, &owner, o.body, &handed)
                    }
                    None => continue,
                    // A parameter: what every call of the function passes, one module name.
                    Some(i) => {
                        let Some((name, args)) = passed_everywhere(o, &owner, i) else {
                            continue;
                        };
                        if o.bound.get(name.as_str()) != Some(&(1, true)) {
                            continue;
                        }
                        let args: Vec<TextRange> =
                            args.into_iter().chain(handed.iter().copied()).collect();
                        let (live, copied) = module_uses(ck, &name, o.body, &args);
                        let (inside, _) = module_uses(ck, &owner, search, &[]);
                        (live || inside, copied)
                    }
                }
            } else {
                continue;
            };
            if live {
                continue;
            }
            let opt = dotted(&call.func)
                .map(|n| n.rsplit('.').next().unwrap_or(&n).to_owned())
                .unwrap_or_else(|| "the optimizer".into());
            let how = if copied {
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

/// The one plain name every call of `o.function` in the module passes for its parameter
/// `param` (at `index`), with those arguments' ranges; `None` when a call passes anything else
/// or the function is never called by name.
fn passed_everywhere(o: &Outer, param: &str, index: usize) -> Option<(String, Vec<TextRange>)> {
    struct Calls<'a>(&'a str, Vec<&'a ExprCall>);
    impl<'a> Visitor<'a> for Calls<'a> {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Call(c) = e {
                if matches!(c.func.as_ref(), Expr::Name(n) if n.id.as_str() == self.0) {
                    self.1.push(c);
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut calls = Calls(o.function.name.id.as_str(), Vec::new());
    calls.visit_body(o.body);
    let mut name: Option<String> = None;
    let mut args = Vec::new();
    for c in &calls.1 {
        let arg = crate::checker::argument(c, param, index)?;
        let Expr::Name(n) = arg else { return None };
        if name.as_deref().is_some_and(|m| m != n.id.as_str()) {
            return None;
        }
        name = Some(n.id.to_string());
        args.push(arg.range());
    }
    name.map(|n| (n, args))
}

pub fn check(ck: &mut Checker, module: &ModModule) {
    if !trains(module) {
        return;
    }
    // Module level: its names are globals, used anywhere in the file.
    check_scope(ck, &module.body, &module.body, None);
    let mut stmts = Vec::new();
    flatten(&module.body, &mut stmts);
    let globals = bindings(ck, &stmts);
    // The module's functions, and the methods that train of its plain classes (a trainer of
    // the script's own; not a test case's methods, nor a module's).
    let functions = module.body.iter().flat_map(|s| match s {
        Stmt::FunctionDef(f) => vec![f],
        Stmt::ClassDef(c) if c.arguments.as_ref().is_none_or(|a| a.args.is_empty()) => c
            .body
            .iter()
            .filter_map(|m| match m {
                Stmt::FunctionDef(f) if calls_backward(&f.body) => Some(f),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    });
    for f in functions {
        {
            // A function's own names (a `global` one is the module's, and counted there).
            if f.body.iter().any(|s| matches!(s, Stmt::Global(_))) {
                continue;
            }
            let outer = Outer {
                bound: &globals,
                body: &module.body,
                function: f,
            };
            check_scope(ck, &f.body, &f.body, Some(&outer));
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
    fn a_function_builds_the_optimizer_over_a_module_of_the_script() {
        // Mean teacher: the loss runs the EMA copy; the optimizer, built in `train()`, holds
        // the student, a global, or the student passed in.
        let head = "import copy\nimport torch\nimport torch.nn as nn\nstudent = nn.Linear(6, 2)\nema = copy.deepcopy(student)\n";
        let loop_ = "    for x, y in data:\n        loss = nn.functional.cross_entropy(ema(x), y)\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n";
        let global = format!("{head}def train():\n    opt = torch.optim.Adam(student.parameters())\n{loop_}train()\n");
        assert_eq!(codes(&global), vec![("GS331".into(), 7)]);
        let param = format!("{head}def train(model):\n    opt = torch.optim.Adam(model.parameters())\n{loop_}train(student)\n");
        assert_eq!(codes(&param), vec![("GS331".into(), 7)]);
        // The student runs: in the function, or handed on elsewhere, or the calls disagree.
        for src in [
            global.replace("ema(x)", "student(x)"),
            param.replace("ema(x)", "model(x)"),
            format!("{global}evaluate(student)\n"),
            format!("{param}train(ema)\n"),
            format!("{global}def probe(student=student):\n    return student\n"),
        ] {
            assert!(codes(&src).is_empty(), "{src}");
        }
        // Built by a factory of the file: handing the student to it is no use of it.
        let factory = format!("{head}def build(model):\n    return torch.optim.Adam(model.parameters())\nopt = build(student)\n{}", loop_.replace("\n    ", "\n").trim_start());
        assert_eq!(codes(&factory), vec![("GS331".into(), 8)], "{factory}");
        assert!(codes(&factory.replace("ema(x)", "student(x)")).is_empty());
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
            "train(model.to(device), opt)\nloss.backward()\n",
            "net = model.cuda()\nnet(x).sum().backward()\n",
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
