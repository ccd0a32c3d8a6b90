//! What a plain class keeps from its construction, read as what the construction passes.
//!
//! Scripts often move their training loop into a small class of their own:
//!
//! ```python
//! class Trainer:
//!     def __init__(self, model, optimizer):
//!         self.model = model
//!         self.optimizer = optimizer
//!
//!     def fit(self, loader):
//!         for x, y in loader:
//!             loss = F.mse_loss(self.model(x).detach(), y)
//!             ...
//!
//! Trainer(model, optimizer).fit(loader)
//! ```
//!
//! The rules read names (`model`, `optimizer`) and the modules of the file; `self.model` in a
//! method of a class that is no module is none of them, and every bug inside such a class went
//! unseen. Before any rule runs, each read of such an attribute is rewritten, in the syntax tree
//! only, to the name the construction passes (`model`; inside `__init__`, to its own
//! parameter), keeping the attribute's range, so locations, snippets and fixes show the user's
//! text.
//!
//! Only where the rewrite means what the code means: a class of the file's top level with no
//! base class (a module, a `LightningModule`, a framework's trainer are read by the rules as
//! they are) and no decorator, named exactly once in the file, by its one construction, which
//! passes no `*args` / `**kwargs`; an attribute set once, by a statement of `__init__`'s own
//! body, to a parameter `__init__` never rebinds, which the construction gives as a plain name;
//! no attribute of that name set anywhere else in the file (on the instance or anything
//! else, `setattr` with that name written out), no `setattr` inside the class; a
//! method that binds the name itself (a parameter, a local) keeps `self.<attr>`.

use std::collections::{HashMap, HashSet};

use ruff_python_ast::visitor::transformer::{self, Transformer};
use ruff_python_ast::visitor::{self as visitor, Visitor};
use ruff_python_ast::{AtomicNodeIndex, Expr, ExprContext, ExprName, ModModule, Stmt};
use ruff_text_size::{Ranged, TextRange};

use crate::flow::param_names;

/// Per class (by its index in the module's body), attribute -> the name the construction
/// passes for it, the `__init__` parameter it was set from, and that argument's range.
type Kept = HashMap<usize, HashMap<String, (String, String, TextRange)>>;

/// Loads of each name, and the calls whose callee is a bare name, in the whole file; the
/// attribute names stored (or deleted) on anything; whether `setattr` is called.
#[derive(Default)]
struct Uses<'a> {
    loads: HashMap<&'a str, usize>,
    calls: HashMap<&'a str, Vec<&'a ruff_python_ast::ExprCall>>,
    attr_stores: HashMap<&'a str, usize>,
    /// `setattr(...)` calls: where, and the attribute name when a literal.
    setattrs: Vec<(ruff_text_size::TextRange, Option<String>)>,
}

impl<'a> Visitor<'a> for Uses<'a> {
    fn visit_expr(&mut self, e: &'a Expr) {
        match e {
            Expr::Name(n) if n.ctx == ExprContext::Load => {
                *self.loads.entry(n.id.as_str()).or_default() += 1;
            }
            Expr::Attribute(a) if matches!(a.ctx, ExprContext::Store | ExprContext::Del) => {
                *self.attr_stores.entry(a.attr.id.as_str()).or_default() += 1;
            }
            Expr::Call(c) => {
                if let Expr::Name(n) = c.func.as_ref() {
                    self.calls.entry(n.id.as_str()).or_default().push(c);
                    if n.id.as_str() == "setattr" {
                        let attr = match c.arguments.args.get(1) {
                            Some(Expr::StringLiteral(l)) => Some(l.value.to_str().to_owned()),
                            _ => None,
                        };
                        self.setattrs.push((c.range(), attr));
                    }
                }
            }
            _ => {}
        }
        visitor::walk_expr(self, e);
    }
}

/// Every name a statement binds (a definition's own name and parameters, assignment and loop
/// targets, imports, `except ... as`, names a comprehension binds).
fn bound_in(s: &Stmt) -> HashSet<String> {
    #[derive(Default)]
    struct Bound(HashSet<String>);
    impl<'a> Visitor<'a> for Bound {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            match s {
                Stmt::FunctionDef(f) => {
                    self.0.insert(f.name.id.to_string());
                }
                Stmt::ClassDef(c) => {
                    self.0.insert(c.name.id.to_string());
                }
                Stmt::Import(i) => {
                    for a in &i.names {
                        let n = a.asname.as_ref().map_or_else(
                            || a.name.id.split('.').next().unwrap_or_default(),
                            |n| n.id.as_str(),
                        );
                        self.0.insert(n.to_owned());
                    }
                }
                Stmt::ImportFrom(f) => {
                    for a in &f.names {
                        self.0
                            .insert(a.asname.as_ref().unwrap_or(&a.name).id.to_string());
                    }
                }
                Stmt::Global(g) => self.0.extend(g.names.iter().map(|n| n.id.to_string())),
                Stmt::Nonlocal(g) => self.0.extend(g.names.iter().map(|n| n.id.to_string())),
                _ => {}
            }
            visitor::walk_stmt(self, s);
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Name(n) = e {
                if matches!(n.ctx, ExprContext::Store | ExprContext::Del) {
                    self.0.insert(n.id.to_string());
                }
            }
            visitor::walk_expr(self, e);
        }
        fn visit_parameter(&mut self, p: &'a ruff_python_ast::Parameter) {
            self.0.insert(p.name.id.to_string());
            visitor::walk_parameter(self, p);
        }
        fn visit_except_handler(&mut self, h: &'a ruff_python_ast::ExceptHandler) {
            let ruff_python_ast::ExceptHandler::ExceptHandler(h2) = h;
            if let Some(n) = &h2.name {
                self.0.insert(n.id.to_string());
            }
            visitor::walk_except_handler(self, h);
        }
    }
    let mut b = Bound::default();
    b.visit_stmt(s);
    b.0
}

/// `self.<attr>` (the receiver is the bare name `self`).
fn self_attr(e: &Expr) -> Option<&str> {
    match e {
        Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") => {
            Some(a.attr.id.as_str())
        }
        _ => None,
    }
}

/// The attributes each plain class keeps from its one construction (see the module's doc).
fn kept(module: &ModModule) -> Kept {
    let mut uses = Uses::default();
    for s in &module.body {
        uses.visit_stmt(s);
    }
    let mut out = Kept::new();
    for (i, s) in module.body.iter().enumerate() {
        let Stmt::ClassDef(c) = s else { continue };
        let name = c.name.id.as_str();
        let plain = c.decorator_list.is_empty()
            && c.arguments.as_ref().is_none_or(|a| {
                a.keywords.is_empty()
                    && a.args
                        .iter()
                        .all(|b| matches!(b, Expr::Name(n) if n.id.as_str() == "object"))
            });
        // Named once, by its construction.
        let calls = uses.calls.get(name).map_or(&[][..], Vec::as_slice);
        // (A `setattr` inside the class may set any attribute.)
        let sets_itself = uses
            .setattrs
            .iter()
            .any(|(r, _)| c.range().contains_range(*r));
        if !plain || uses.loads.get(name) != Some(&1) || calls.len() != 1 || sets_itself {
            continue;
        }
        let call = calls[0];
        if call
            .arguments
            .args
            .iter()
            .any(|a| matches!(a, Expr::Starred(_)))
            || call.arguments.keywords.iter().any(|k| k.arg.is_none())
        {
            continue;
        }
        let Some(init) = c.body.iter().find_map(|s| match s {
            Stmt::FunctionDef(f) if f.name.id.as_str() == "__init__" => Some(f),
            _ => None,
        }) else {
            continue;
        };
        let params = param_names(&init.parameters);
        if params.first().map(String::as_str) != Some("self") {
            continue;
        }
        let positional = init.parameters.posonlyargs.len() + init.parameters.args.len();
        // What the construction passes for each parameter of `__init__`, when a plain name.
        let passed = |p: &str| -> Option<(String, TextRange)> {
            let at = params.iter().position(|q| q == p)?;
            // (`self` is not passed: the call's positions start at the second parameter.)
            let index = if at < positional { at - 1 } else { usize::MAX };
            let arg = crate::checker::argument(call, p, index)?;
            match arg {
                Expr::Name(n) if n.id.as_str() != "self" => Some((n.id.to_string(), arg.range())),
                _ => None,
            }
        };
        // Parameters `__init__` rebinds (`model = model.to(device)`) are not what was passed.
        let rebound: HashSet<String> = init.body.iter().flat_map(bound_in).collect();
        let mut attrs = HashMap::new();
        for st in &init.body {
            let Stmt::Assign(a) = st else { continue };
            let ([target], Expr::Name(p)) = (&a.targets[..], a.value.as_ref()) else {
                continue;
            };
            let Some(attr) = self_attr(target) else {
                continue;
            };
            let p = p.id.as_str();
            let set_by_name = uses
                .setattrs
                .iter()
                .any(|(_, a)| a.as_deref() == Some(attr));
            if p == "self"
                || rebound.contains(p)
                || uses.attr_stores.get(attr) != Some(&1)
                || set_by_name
            {
                continue;
            }
            if let Some((n, r)) = passed(p) {
                attrs.insert(attr.to_owned(), (n, p.to_owned(), r));
            }
        }
        if !attrs.is_empty() {
            out.insert(i, attrs);
        }
    }
    out
}

/// Reads of `self.<attr>` rewritten to the name it stands for.
struct Rewrite<'k>(HashMap<&'k str, &'k str>);

impl Transformer for Rewrite<'_> {
    fn visit_expr(&self, e: &mut Expr) {
        if let Expr::Attribute(a) = e {
            if a.ctx == ExprContext::Load {
                if let Some(name) = self_attr(e).and_then(|attr| self.0.get(attr)) {
                    *e = Expr::Name(ExprName {
                        node_index: AtomicNodeIndex::default(),
                        range: e.range(),
                        id: (*name).into(),
                        ctx: ExprContext::Load,
                    });
                    return;
                }
            }
        }
        transformer::walk_expr(self, e);
    }
}

/// Rewrites, in place, the reads of the attributes [`kept`] finds in their classes' methods.
/// Returns the construction's arguments whose every read was rewritten, each with its class's
/// range: the class only keeps them, so passing one to it is no use of its own (the uses are
/// the methods', where a search that covers the class finds them).
pub fn inline_kept(module: &mut ModModule) -> Vec<(TextRange, TextRange)> {
    let kept = kept(module);
    for (i, attrs) in &kept {
        let Some(Stmt::ClassDef(c)) = module.body.get_mut(*i) else {
            continue;
        };
        for s in c.body.iter_mut() {
            let Stmt::FunctionDef(f) = s else { continue };
            let is_init = f.name.id.as_str() == "__init__";
            let first = param_names(&f.parameters).into_iter().next();
            let plain_method = first.as_deref() == Some("self")
                && !f.decorator_list.iter().any(|d| {
                    crate::checker::dotted(&d.expression)
                        .is_some_and(|n| n == "staticmethod" || n == "classmethod")
                });
            if !plain_method {
                continue;
            }
            let own = bound_in(s);
            let map: HashMap<&str, &str> = attrs
                .iter()
                .filter_map(|(attr, (name, param, _))| {
                    if is_init {
                        Some((attr.as_str(), param.as_str()))
                    } else {
                        (!own.contains(name)).then_some((attr.as_str(), name.as_str()))
                    }
                })
                .collect();
            if map.is_empty() {
                continue;
            }
            let t = Rewrite(map);
            let Stmt::FunctionDef(f) = s else { continue };
            for st in f.body.iter_mut() {
                t.visit_stmt(st);
            }
        }
    }
    let mut inlined = Vec::new();
    for (i, attrs) in &kept {
        let Some(Stmt::ClassDef(c)) = module.body.get(*i) else {
            continue;
        };
        let mut left = SelfReads::default();
        for s in &c.body {
            left.visit_stmt(s);
        }
        inlined.extend(
            attrs
                .iter()
                .filter(|(attr, _)| !left.0.contains(attr.as_str()))
                .map(|(_, (_, _, r))| (*r, c.range())),
        );
    }
    inlined
}

/// The attributes of `self` still read.
#[derive(Default)]
struct SelfReads(HashSet<String>);

impl<'a> Visitor<'a> for SelfReads {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let (Some(attr), Expr::Attribute(a)) = (self_attr(e), e) {
            if a.ctx == ExprContext::Load {
                self.0.insert(attr.to_owned());
            }
        }
        visitor::walk_expr(self, e);
    }
}

#[cfg(test)]
mod tests {
    use crate::rules::codes;

    const TRAINER: &str = "import torch\nimport torch.nn as nn\n\nenc = nn.Linear(4, 4)\ndec = nn.Linear(4, 1)\nopt = torch.optim.SGD(list(enc.parameters()) + list(dec.parameters()), lr=0.1)\n\n\nclass Trainer:\n    def __init__(self, enc, dec, opt):\n        self.enc = enc\n        self.dec = dec\n        self.opt = opt\n\n    def fit(self):\n        for _ in range(3):\n            x = torch.randn(8, 4)\n            h = self.enc(x).detach()\n            loss = self.dec(h).mean()\n            self.opt.zero_grad()\n            loss.backward()\n            self.opt.step()\n\n\nTrainer(enc, dec, opt).fit()\n";

    #[test]
    fn a_trainer_class_reads_as_the_models_it_is_given() {
        assert_eq!(codes(TRAINER), vec![("GS316".into(), 18)]);
        // Kept in a name, called later; built inside `main()`; keywords.
        let named = TRAINER.replace(
            "Trainer(enc, dec, opt).fit()",
            "t = Trainer(dec=dec, opt=opt, enc=enc)\nt.fit()",
        );
        assert_eq!(codes(&named), vec![("GS316".into(), 18)]);
        let in_main = "import torch\nimport torch.nn as nn\n\n\nclass Trainer:\n    def __init__(self, enc, dec, opt):\n        self.enc = enc\n        self.dec = dec\n        self.opt = opt\n\n    def fit(self):\n        for _ in range(3):\n            x = torch.randn(8, 4)\n            h = self.enc(x).detach()\n            loss = self.dec(h).mean()\n            self.opt.zero_grad()\n            loss.backward()\n            self.opt.step()\n\n\ndef main():\n    enc = nn.Linear(4, 4)\n    dec = nn.Linear(4, 1)\n    opt = torch.optim.SGD(list(enc.parameters()) + list(dec.parameters()), lr=0.1)\n    Trainer(enc, dec, opt).fit()\n\n\nmain()\n";
        assert_eq!(codes(in_main), vec![("GS316".into(), 14)]);
        // The correct loop stays quiet.
        assert!(codes(&TRAINER.replace(".detach()", "")).is_empty());
    }

    #[test]
    fn the_rules_read_a_trainer_like_the_loop_it_holds() {
        // A clip bound the construction passes as 0, an in-place op on a weight while
        // recording, both through `self.`.
        let src = "import torch\nimport torch.nn as nn\n\nmodel = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nmax_norm = 0.0\n\n\nclass Trainer:\n    def __init__(self, max_norm, model, opt):\n        self.max_norm = max_norm\n        self.model = model\n        self.opt = opt\n\n    def fit(self):\n        for step in range(3):\n            self.model[0].weight.clamp_(-1.0, 1.0)\n            loss = self.model(torch.randn(2, 4)).sum()\n            self.opt.zero_grad()\n            loss.backward()\n            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)\n            self.opt.step()\n\n\nTrainer(max_norm, model, opt).fit()\n";
        assert_eq!(codes(src), vec![("GS308".into(), 21), ("GS320".into(), 17)]);
        let fine = src
            .replace("max_norm = 0.0", "max_norm = 1.0")
            .replace("            self.model[0].weight.clamp_(-1.0, 1.0)\n", "");
        assert!(codes(&fine).is_empty(), "{:?}", codes(&fine));
    }

    #[test]
    fn a_model_a_trainer_only_keeps_is_no_use_of_it() {
        // GS331: the optimizer over the student, the loss through the EMA copy; handing the
        // student to the trainer that keeps it is no use of it.
        let src = "import copy\nimport torch\nimport torch.nn as nn\nstudent = nn.Linear(6, 2)\nema = copy.deepcopy(student)\n\n\nclass Trainer:\n    def __init__(self, ema, student):\n        self.ema = ema\n        self.student = student\n\n    def fit(self):\n        opt = torch.optim.Adam(self.student.parameters())\n        for x, y in data:\n            loss = nn.functional.cross_entropy(self.ema(x), y)\n            opt.zero_grad()\n            loss.backward()\n            opt.step()\n\n\nTrainer(ema, student).fit()\n";
        assert_eq!(codes(src), vec![("GS331".into(), 14)]);
        assert!(codes(&src.replace("self.ema(x)", "self.student(x)")).is_empty());
    }

    #[test]
    fn the_rewrite_stays_where_it_means_what_the_code_means() {
        let cases = [
            // Two constructions: which one a method runs on is unknown.
            TRAINER.replace(
                "Trainer(enc, dec, opt).fit()",
                "Trainer(enc, dec, opt).fit()\nTrainer(dec, enc, opt).fit()",
            ),
            // A base class (a framework's), a subclass of the file, a decorator.
            TRAINER.replace("class Trainer:", "class Trainer(Base):"),
            TRAINER.replace("class Trainer:", "@dataclass\nclass Trainer:"),
            // The attribute set again elsewhere (on the instance, in a method).
            TRAINER.replace(
                "Trainer(enc, dec, opt).fit()",
                "t = Trainer(enc, dec, opt)\nt.enc = nn.Linear(4, 4)\nt.fit()",
            ),
            // `__init__` rebinds the parameter first.
            TRAINER.replace(
                "        self.enc = enc\n",
                "        enc = nn.Linear(4, 4)\n        self.enc = enc\n",
            ),
            // Not a plain name at the construction.
            TRAINER.replace(
                "Trainer(enc, dec, opt)",
                "Trainer(enc.to(\"cpu\"), dec, opt)",
            ),
            // The method binds the name itself.
            TRAINER.replace("    def fit(self):", "    def fit(self, enc=None):"),
        ];
        for src in &cases {
            assert!(codes(src).is_empty(), "{src}");
        }
    }
}
