//! One walk over a module's AST, keeping the scope rules need, dispatching to every rule.

use std::collections::{HashMap, HashSet};

use gradsleuth_model::{Finding, Location};
use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::Ranged;

use crate::rules;

/// A text edit a rule offers as a fix that keeps the code's meaning (`--fix`, `--diff`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The finding it fixes: code and line.
    pub code: String,
    pub line: u32,
    /// Byte range in the source, and its replacement.
    pub start: usize,
    pub end: usize,
    pub content: String,
}

/// What a rule may ask about where it is.
pub struct Checker<'a> {
    pub path: String,
    pub source: &'a str,
    line_starts: Vec<usize>,
    pub findings: Vec<Finding>,
    pub edits: Vec<Edit>,
    /// How this file names `torch.nn` (`nn` after `import torch.nn as nn` or `from torch import
    /// nn`, `torch.nn` after `import torch`), for fixes that insert `nn.ModuleList`.
    pub nn_prefix: Option<String>,
    /// Arguments a plain class of the file only keeps, its reads of them rewritten to the names
    /// passed (`crate::holders`), each with the class's range: handing one to it is no use of
    /// its own where the class is in view.
    pub inlined: Vec<(ruff_text_size::TextRange, ruff_text_size::TextRange)>,
    /// Names of classes in this file that subclass `nn.Module` (directly or not).
    module_classes: HashSet<String>,
    /// Module classes of this file that hold no parameter or submodule (a loss written as a
    /// module): building one inside `forward` loses nothing.
    pub param_free_classes: HashSet<String>,
    /// Module classes that train themselves: a method builds an optimizer over
    /// `self.parameters()` (forward-forward layers). A plain list of them loses nothing.
    pub self_optimizing: HashSet<String>,
    /// Every function of the file by name (nested ones too; the last definition wins).
    pub defs: HashMap<String, &'a ruff_python_ast::StmtFunctionDef>,
    /// Per enclosing function: local names it fills with modules.
    pub module_lists: Vec<rules::unregistered::LocalModules>,
    /// Per enclosing class: what its methods fill with modules or parameters.
    class_fills: Vec<ClassFills>,
    /// Functions of this file that return a newly built module (`def mlp(...): return
    /// nn.Sequential(...)`).
    module_factories: HashSet<String>,
    /// Methods of the current class that `forward` calls (directly or through each other).
    forward_helpers: HashSet<String>,
    /// Functions that give a parameter of theirs a new submodule (see GS322).
    replacing: Vec<(String, usize, String)>,
    /// Models kept in a holder's attribute (see GS322).
    held: Vec<rules::optimizer_before_replace::Held>,
    /// Enclosing classes: (name, is an nn.Module subclass).
    classes: Vec<(String, bool)>,
    /// Per enclosing class: does it build parameters or submodules into `self` (or is that
    /// unknown: no `__init__` of its own)?
    holds: Vec<bool>,
    /// Enclosing function names.
    functions: Vec<String>,
    /// What each name (`opt`, `self.lr_scheduler`) is assigned anywhere in the file: the
    /// called name when the value is a call (`get_scheduler`), None for anything else.
    bindings: HashMap<String, Vec<Option<String>>>,
    /// Plain names the file calls (`model(x)`) or uses as a module or an optimizer
    /// (`model.parameters()`, `model.train()`, `opt.zero_grad()`).
    models: HashSet<String>,
    /// Names assigned a list of parameters (`params = list(model.parameters())`), each with
    /// whether they are a whole model's (see `rules::update_discarded::param_list`). A name
    /// is taken for the whole file: a loop over it is a loop over parameters.
    pub param_lists: HashMap<String, bool>,
    /// The outputs given to a `torch.autograd.grad` that raises when one of its inputs has no
    /// path to them (no `allow_unused=True`): see `rules::loss_rewrap`.
    pub(crate) loud_grad_outputs: Vec<ruff_text_size::TextRange>,
}

/// `a.b.c` for a chain of names and attributes; None for anything else.
pub fn dotted(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Name(n) => Some(n.id.to_string()),
        Expr::Attribute(a) => Some(format!("{}.{}", dotted(&a.value)?, a.attr.id)),
        _ => None,
    }
}

/// The Python that reaches a submodule, as written: `model.layers[1].fc2`,
/// `model.classifier[-1]`, `self.heads["cls"]`. [`dotted`] with constant subscripts (a
/// `Sequential`'s or `ModuleList`'s index, a `ModuleDict`'s key); None for anything computed.
pub fn module_path(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Name(n) => Some(n.id.to_string()),
        Expr::Attribute(a) => Some(format!("{}.{}", module_path(&a.value)?, a.attr.id)),
        Expr::Subscript(s) => {
            let key = match s.slice.as_ref() {
                Expr::NumberLiteral(n) => match &n.value {
                    ruff_python_ast::Number::Int(i) => i.to_string(),
                    _ => return None,
                },
                Expr::UnaryOp(u) if matches!(u.op, ruff_python_ast::UnaryOp::USub) => {
                    match u.operand.as_ref() {
                        Expr::NumberLiteral(n) => match &n.value {
                            ruff_python_ast::Number::Int(i) => format!("-{i}"),
                            _ => return None,
                        },
                        _ => return None,
                    }
                }
                Expr::StringLiteral(k) => format!("{:?}", k.value.to_str()),
                _ => return None,
            };
            Some(format!("{}[{key}]", module_path(&s.value)?))
        }
        _ => None,
    }
}

/// The [`module_path`] of every sub-expression of `e` that has one, outermost first
/// (`nn.Linear(model.fc.in_features, n)`: `nn.Linear`, `nn`, `model.fc.in_features`, ...).
pub fn module_paths(e: &Expr) -> Vec<String> {
    struct Paths(Vec<String>);
    impl<'a> Visitor<'a> for Paths {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Some(p) = module_path(e) {
                self.0.push(p);
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut v = Paths(Vec::new());
    v.visit_expr(e);
    v.0
}

/// A Hugging Face `Trainer` subclass (`Trainer`, `Seq2SeqTrainer`, TRL's `SFTTrainer`): the
/// trainer calls its `compute_loss` and `training_step` with gradients on and calls backward
/// on what `compute_loss` returns.
pub fn is_trainer_class(c: &ruff_python_ast::StmtClassDef) -> bool {
    c.arguments.as_ref().is_some_and(|a| {
        a.args.iter().any(|b| {
            dotted(b).is_some_and(|n| n.rsplit('.').next().unwrap_or(&n).ends_with("Trainer"))
        })
    })
}

/// What follows `owner` in `path` when `path` is `owner` or a part of it (`model` in
/// `model.layers[1].fc2`: `layers[1].fc2`); `Some("")` for `owner` itself.
pub fn part_of<'p>(path: &'p str, owner: &str) -> Option<&'p str> {
    let rest = path.strip_prefix(owner)?;
    if rest.is_empty() {
        Some(rest)
    } else if let Some(r) = rest.strip_prefix('.') {
        Some(r)
    } else if rest.starts_with('[') {
        Some(rest)
    } else {
        None
    }
}

/// `self.x = Class(...)` / `self.x = nn.Linear(...)` among the statements (not nested scopes).
fn builds_submodule(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Assign(a) => {
            a.targets.iter().any(|t| {
                matches!(t, Expr::Attribute(at) if matches!(at.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self"))
            }) && constructs_instances(&a.value)
        }
        // `self.layer.append(T5LayerFF(config))`
        Stmt::Expr(e) => matches!(e.value.as_ref(), Expr::Call(c) if matches!(c.func.as_ref(),
            Expr::Attribute(a) if a.attr.id.as_str() == "append"
                && dotted(&a.value).is_some_and(|d| d.starts_with("self.")))
            && c.arguments.args.first().is_some_and(|x| matches!(x, Expr::Call(k) if dotted(&k.func).is_some_and(|n| {
                n.rsplit('.').next().is_some_and(|l| l.starts_with(|ch: char| ch.is_ascii_uppercase()))
            })))),
        Stmt::If(i) => {
            builds_submodule(&i.body) || i.elif_else_clauses.iter().any(|c| builds_submodule(&c.body))
        }
        Stmt::For(f) => builds_submodule(&f.body),
        _ => false,
    })
}

/// Whether `e` is a container with an element meeting `leaf`: a list, tuple or dict display
/// or comprehension, or `list`/`tuple`/`dict`/`sorted`/`reversed` of one. Any other
/// expression is judged by `other` (a single element, a name, a concatenation).
pub fn container_holds(
    e: &Expr,
    leaf: &dyn Fn(&Expr) -> bool,
    other: &dyn Fn(&Expr) -> bool,
) -> bool {
    match e {
        Expr::List(l) => l.elts.iter().any(leaf),
        Expr::Tuple(t) => t.elts.iter().any(leaf),
        Expr::ListComp(c) => leaf(&c.elt),
        Expr::Generator(c) => leaf(&c.elt),
        Expr::Dict(d) => d.items.iter().any(|i| leaf(&i.value)),
        Expr::DictComp(c) => leaf(&c.value),
        Expr::Call(c)
            if dotted(&c.func).is_some_and(|n| {
                matches!(
                    n.as_str(),
                    "tuple" | "list" | "dict" | "sorted" | "reversed"
                )
            }) =>
        {
            c.arguments
                .args
                .first()
                .is_some_and(|a| container_holds(a, leaf, other))
        }
        _ => other(e),
    }
}

/// `Class(...)`, or a container of such constructions (`[Block(i) for i in ...]`,
/// `list([...])`, `(A(), B())`): what `self.x = ...` in `__init__` holds when it builds
/// submodules, registered or not.
fn constructs_instances(e: &Expr) -> bool {
    let class_call = |x: &Expr| {
        matches!(x, Expr::Call(c) if dotted(&c.func).is_some_and(|n| {
            n.rsplit('.').next().is_some_and(|l| l.starts_with(|ch: char| ch.is_ascii_uppercase()))
        }))
    };
    container_holds(e, &class_call, &class_call)
}

/// The dotted names of every call in an expression (`torch.isfinite(g).all()` gives
/// `torch.isfinite`, and the method call's own name).
pub fn dotted_calls(e: &Expr) -> Vec<String> {
    struct Calls(Vec<String>);
    impl<'a> Visitor<'a> for Calls {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Call(c) = e {
                if let Some(n) = dotted(&c.func) {
                    self.0.push(n);
                } else if let Expr::Attribute(a) = c.func.as_ref() {
                    self.0.push(a.attr.id.to_string());
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut c = Calls(Vec::new());
    c.visit_expr(e);
    c.0
}

/// [`dotted_calls`] over statements.
fn dotted_calls_in(body: &[Stmt]) -> Vec<String> {
    struct All(Vec<String>);
    impl<'a> Visitor<'a> for All {
        fn visit_expr(&mut self, e: &'a Expr) {
            if matches!(e, Expr::Call(_)) {
                self.0.extend(dotted_calls(e));
                return;
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut a = All(Vec::new());
    for s in body {
        a.visit_stmt(s);
    }
    a.0
}

/// `torch.no_grad()`, `torch.inference_mode()`, `torch.set_grad_enabled(False)` (called or
/// not, as a context manager or a decorator).
pub fn disables_grad(expr: &Expr) -> bool {
    let (target, call) = match expr {
        Expr::Call(c) => (dotted(&c.func), Some(c)),
        other => (dotted(other), None),
    };
    let Some(target) = target else { return false };
    if target.ends_with("no_grad") || target.ends_with("inference_mode") {
        // `inference_mode(False)` re-enables.
        return !call.is_some_and(
            |c| matches!(c.arguments.args.first(), Some(Expr::BooleanLiteral(b)) if !b.value),
        );
    }
    target.ends_with("set_grad_enabled")
        && call.is_some_and(
            |c| matches!(c.arguments.args.first(), Some(Expr::BooleanLiteral(b)) if !b.value),
        )
}

/// Recording turned back on (as a block or a decorator): `torch.enable_grad()`, or
/// `torch.set_grad_enabled(x)` / `torch.inference_mode(x)` given anything but the literal that
/// turns it off ([`disables_grad`]).
pub fn enables_grad(e: &Expr) -> bool {
    let (target, call) = match e {
        Expr::Call(c) => (dotted(&c.func), Some(c)),
        other => (dotted(other), None),
    };
    target.is_some_and(|t| {
        t.ends_with("enable_grad")
            || (t.ends_with("set_grad_enabled") && !disables_grad(e))
            || (t.ends_with("inference_mode")
                && call.is_some_and(|c| !c.arguments.args.is_empty())
                && !disables_grad(e))
    })
}

/// What a class's methods fill with modules or parameters: each method's own (read once, with
/// the class, and taken when the method is checked), and the `self.` attributes any of them
/// fills (created in `__init__`, filled by an `update_layer`).
#[derive(Default)]
struct ClassFills {
    all: rules::unregistered::LocalModules,
    methods: HashMap<u32, rules::unregistered::LocalModules>,
}

/// The names a binding target gives values (`a`, `a, (b, *c)`, `[a, b]`).
pub fn bound_names<'a>(target: &'a Expr, out: &mut Vec<&'a str>) {
    match target {
        Expr::Name(n) => out.push(n.id.as_str()),
        Expr::Tuple(t) => t.elts.iter().for_each(|x| bound_names(x, out)),
        Expr::List(l) => l.elts.iter().for_each(|x| bound_names(x, out)),
        Expr::Starred(s) => bound_names(&s.value, out),
        _ => {}
    }
}

/// Methods only a module or an optimizer has: a name they are called on runs as one
/// (`Checker::runs_as_model`; GS324's before-loop check reads them in the text, for dotted
/// holders too).
pub(crate) const MODULE_METHODS: &[&str] = &[
    "parameters",
    "named_parameters",
    "train",
    "eval",
    "state_dict",
    "zero_grad",
    "modules",
    "children",
    "requires_grad_",
    "forward",
];

/// What a statement binds and to what: an assignment's targets and value (None: the target
/// is rebound to something else, as by `+=` or a `for` loop); nothing for other statements.
pub fn bound_by(s: &Stmt) -> (&[Expr], Option<&Expr>) {
    match s {
        Stmt::Assign(a) => (&a.targets, Some(&a.value)),
        Stmt::AnnAssign(a) => (std::slice::from_ref(&a.target), a.value.as_deref()),
        Stmt::AugAssign(a) => (std::slice::from_ref(&a.target), None),
        Stmt::For(f) => (std::slice::from_ref(&f.target), None),
        _ => (&[], None),
    }
}

/// What a call passes for the parameter `param`: its keyword, or the positional argument at
/// `index` (`usize::MAX` for a keyword-only parameter).
pub fn argument<'e>(
    call: &'e ruff_python_ast::ExprCall,
    param: &str,
    index: usize,
) -> Option<&'e Expr> {
    call.arguments
        .keywords
        .iter()
        .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == param))
        .map(|k| &k.value)
        .or_else(|| call.arguments.args.get(index))
}

/// The source text of `node`.
pub fn text_of<'s>(source: &'s str, node: &impl Ranged) -> &'s str {
    let r = node.range();
    &source[r.start().to_usize()..r.end().to_usize()]
}

/// The called name of a call, e.g. `torch.tensor`, `self.register_buffer`.
pub fn call_name(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Call(c) => dotted(&c.func),
        _ => None,
    }
}

impl<'a> Checker<'a> {
    pub fn new(path: &str, source: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(source.match_indices('\n').map(|(i, _)| i + 1));
        Checker {
            path: path.to_owned(),
            source,
            line_starts,
            findings: Vec::new(),
            edits: Vec::new(),
            nn_prefix: None,
            inlined: Vec::new(),
            module_classes: HashSet::new(),
            module_lists: Vec::new(),
            class_fills: Vec::new(),
            defs: HashMap::new(),
            param_free_classes: HashSet::new(),
            self_optimizing: HashSet::new(),
            module_factories: HashSet::new(),
            forward_helpers: HashSet::new(),
            replacing: Vec::new(),
            held: Vec::new(),
            classes: Vec::new(),
            holds: Vec::new(),
            functions: Vec::new(),
            param_lists: HashMap::new(),
            bindings: HashMap::new(),
            models: HashSet::new(),
            loud_grad_outputs: Vec::new(),
        }
    }

    pub fn check_module(&mut self, module: &'a ruff_python_ast::ModModule) {
        self.nn_prefix = nn_prefix(&module.body);
        struct Models(HashSet<String>);
        impl<'a> Visitor<'a> for Models {
            fn visit_expr(&mut self, e: &'a Expr) {
                if let Expr::Call(c) = e {
                    match c.func.as_ref() {
                        Expr::Name(n) => {
                            self.0.insert(n.id.to_string());
                        }
                        Expr::Attribute(a) => {
                            if let Expr::Name(n) = a.value.as_ref() {
                                if MODULE_METHODS.contains(&a.attr.id.as_str()) {
                                    self.0.insert(n.id.to_string());
                                }
                            }
                        }
                        _ => {}
                    }
                }
                visitor::walk_expr(self, e);
            }
        }
        let mut models = Models(HashSet::new());
        for s in &module.body {
            models.visit_stmt(s);
        }
        self.models = models.0;
        struct Bindings(HashMap<String, Vec<Option<String>>>);
        impl<'a> Visitor<'a> for Bindings {
            fn visit_stmt(&mut self, s: &'a Stmt) {
                let (targets, value) = bound_by(s);
                for t in targets {
                    if let Some(name) = dotted(t) {
                        self.0
                            .entry(name)
                            .or_default()
                            .push(value.and_then(call_name));
                    }
                }
                visitor::walk_stmt(self, s);
            }
        }
        let mut bindings = Bindings(HashMap::new());
        for s in &module.body {
            bindings.visit_stmt(s);
        }
        self.bindings = bindings.0;
        struct Defs<'a>(HashMap<String, &'a ruff_python_ast::StmtFunctionDef>);
        impl<'a> Visitor<'a> for Defs<'a> {
            fn visit_stmt(&mut self, s: &'a Stmt) {
                if let Stmt::FunctionDef(f) = s {
                    self.0.insert(f.name.id.to_string(), f);
                }
                visitor::walk_stmt(self, s);
            }
        }
        let mut defs = Defs(HashMap::new());
        for s in &module.body {
            defs.visit_stmt(s);
        }
        self.defs = defs.0;
        // Module subclasses first, so a class used before its definition is known. A class
        // that derives from a base this file does not define and has a `forward` is a module
        // too (transformers' `PreTrainedModel`, `GradientCheckpointingLayer`, Lightning's
        // `LightningModule`, any project base class imported from another file).
        let local: HashSet<&str> = module
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::ClassDef(c) => Some(c.name.id.as_str()),
                _ => None,
            })
            .collect();
        // A local class counts as "unknown-based" when its bases reach, through local
        // classes, a base this file does not define: `BertModel(BertPreTrainedModel)` where
        // `BertPreTrainedModel(PreTrainedModel)` has no `forward` of its own.
        let mut unknown_based: HashSet<String> = HashSet::new();
        for _ in 0..4 {
            for stmt in &module.body {
                if let Stmt::ClassDef(c) = stmt {
                    let unknown = c.arguments.as_ref().is_some_and(|args| {
                        args.args.iter().any(|b| {
                            dotted(b).is_some_and(|n| {
                                let last = n.rsplit('.').next().unwrap_or(&n);
                                (!local.contains(last) && last != "object")
                                    || unknown_based.contains(last)
                            })
                        })
                    });
                    if unknown {
                        unknown_based.insert(c.name.id.to_string());
                    }
                }
            }
        }
        for _ in 0..4 {
            for stmt in &module.body {
                if let Stmt::ClassDef(c) = stmt {
                    // ... and that builds submodules of its own in `__init__` (a subclass that
                    // only overrides `forward` of an unknown base says too little to judge).
                    let has_forward = c.body.iter().any(
                        |s| matches!(s, Stmt::FunctionDef(f) if f.name.id.as_str() == "forward"),
                    ) && c.body.iter().any(|s| {
                        matches!(s, Stmt::FunctionDef(f) if f.name.id.as_str() == "__init__" && builds_submodule(&f.body))
                    });
                    let is_module = c.arguments.as_ref().is_some_and(|args| {
                        args.args.iter().any(|b| {
                            dotted(b).is_some_and(|n| {
                                let last = n.rsplit('.').next().unwrap_or(&n);
                                n == "Module"
                                    || n.ends_with("nn.Module")
                                    || ((n.starts_with("nn.") || n.starts_with("torch.nn."))
                                        && last.starts_with(|ch: char| ch.is_ascii_uppercase()))
                                    || self.module_classes.contains(&n)
                                    // Lightning's module: an `nn.Module` whose
                                    // `training_step` computes the loss.
                                    || last == "LightningModule"
                                    || (has_forward
                                        && (!local.contains(last) || unknown_based.contains(last)))
                            })
                        })
                    });
                    if is_module {
                        self.module_classes.insert(c.name.id.to_string());
                    }
                }
            }
        }
        // A mixin of this file that a module class takes in (PEFT's `class Linear(nn.Module,
        // LoraLayer)`): its `self` is that module, and what it keeps in `self` is the module's.
        for _ in 0..4 {
            for stmt in &module.body {
                if let Stmt::ClassDef(c) = stmt {
                    if !self.module_classes.contains(c.name.id.as_str()) {
                        continue;
                    }
                    for b in c.arguments.iter().flat_map(|a| a.args.iter()) {
                        if let Some(n) = dotted(b).filter(|n| local.contains(n.as_str())) {
                            self.module_classes.insert(n);
                        }
                    }
                }
            }
        }
        struct OwnOptimizer(bool);
        impl<'a> Visitor<'a> for OwnOptimizer {
            fn visit_expr(&mut self, e: &'a Expr) {
                if let Expr::Call(c) = e {
                    if dotted(&c.func).is_some_and(|n| crate::flow::is_optimizer_ctor(&n))
                        && c.arguments
                            .args
                            .first()
                            .is_some_and(|a| call_name(a).is_some_and(|n| n == "self.parameters"))
                    {
                        self.0 = true;
                    }
                }
                visitor::walk_expr(self, e);
            }
        }
        for stmt in &module.body {
            if let Stmt::ClassDef(c) = stmt {
                let mut own = OwnOptimizer(false);
                for s in &c.body {
                    own.visit_stmt(s);
                }
                if own.0 {
                    self.self_optimizing.insert(c.name.id.to_string());
                }
            }
        }
        for stmt in &module.body {
            if let Stmt::ClassDef(c) = stmt {
                let plain_base = c.arguments.as_ref().is_some_and(|a| {
                    a.args.iter().all(|b| {
                        dotted(b).is_some_and(|n| n == "Module" || n.ends_with("nn.Module"))
                    })
                });
                if plain_base && self.module_classes.contains(c.name.id.as_str()) {
                    let mut attrs = HashSet::new();
                    for s in &c.body {
                        if let Stmt::FunctionDef(f) = s {
                            crate::flow::collect_self_modules(self, &f.body, &mut attrs);
                        }
                    }
                    // Its own losses and activations hold nothing either (a loss module
                    // combining `nn.L1Loss()` and a loss class defined above it).
                    attrs.retain(|a| !self_built_parameter_free(self, c, a));
                    // Nor a parameter registered by call (`self.register_parameter(...)`,
                    // `self.add_module(...)`, a `Parameter` built anywhere in it).
                    let registers = dotted_calls_in(&c.body).iter().any(|n| {
                        matches!(
                            n.rsplit('.').next().unwrap_or(n),
                            "register_parameter" | "register_module" | "add_module" | "Parameter"
                        )
                    });
                    if attrs.is_empty() && !registers {
                        self.param_free_classes.insert(c.name.id.to_string());
                    }
                }
            }
        }
        for stmt in &module.body {
            if let Stmt::FunctionDef(f) = stmt {
                if returns_module(self, &f.body) {
                    self.module_factories.insert(f.name.id.to_string());
                }
            }
        }
        rules::grad_without_create_graph::check(self, &module.body);
        rules::grad_clip_zero::check_module(self, &module.body);
        rules::frozen_then_optimized::check(self, &module.body);
        rules::peft_unfreeze::check(self, &module.body);
        self.replacing = rules::optimizer_before_replace::replacing_functions(self, &module.body);
        self.held = rules::optimizer_before_replace::held(&module.body);
        let replacing = std::mem::take(&mut self.replacing);
        let held = std::mem::take(&mut self.held);
        rules::optimizer_before_replace::check(self, &module.body, &replacing, &held, None);
        self.replacing = replacing;
        self.held = held;
        rules::optimizer_subset::check(self, module);
        rules::optimizer_never_runs::check(self, module);
        rules::stale_graph::check_block(self, &module.body);
        rules::inplace_param::check(self, module);
        for cut in crate::flow::Flow::run(self, module) {
            rules::dispatch_cut(self, &cut);
        }
        self.visit_body(&module.body);
        // Two routes to one place (a rule and the data flow) give one finding.
        let mut seen = HashSet::new();
        self.findings.retain(|f| {
            let l = f.location.as_ref();
            seen.insert((f.code.clone(), l.map(|l| l.line)))
        });
        // A loss re-made from `.item()` is the round trip's whole story: one finding.
        let rewrapped: HashSet<u32> = self
            .findings
            .iter()
            .filter(|f| f.code == rules::loss_rewrap::RULE.code)
            .filter_map(|f| f.location.as_ref().map(|l| l.line))
            .collect();
        self.findings.retain(|f| {
            f.code != rules::item_roundtrip::RULE.code
                || !f
                    .location
                    .as_ref()
                    .is_some_and(|l| rewrapped.contains(&l.line))
        });
    }

    /// A location for a node: 1-based line and column (in characters), with the snippet.
    pub fn location(&self, node: &impl Ranged) -> Location {
        let start = node.range().start().to_usize();
        let end = node.range().end().to_usize();
        let line_idx = self
            .line_starts
            .partition_point(|&s| s <= start)
            .saturating_sub(1);
        let line_start = self.line_starts[line_idx];
        let line_end = self
            .line_starts
            .get(line_idx + 1)
            .map_or(self.source.len(), |e| e - 1);
        let text = &self.source[line_start..line_end.max(line_start)];
        let col = self.source[line_start..start].chars().count() as u32 + 1;
        let mut loc = Location::new(self.path.clone(), line_idx as u32 + 1);
        loc.column = Some(col);
        let end_idx = self
            .line_starts
            .partition_point(|&s| s <= end)
            .saturating_sub(1);
        loc.end_line = Some(end_idx as u32 + 1);
        loc.end_column =
            Some(self.source[self.line_starts[end_idx]..end].chars().count() as u32 + 1);
        loc.snippet = Some(text.trim_end().to_owned());
        loc.function = self.functions.last().cloned();
        loc
    }

    /// Reports a finding with an edit that fixes it.
    pub fn report_with_edit(
        &mut self,
        finding: Finding,
        range: ruff_text_size::TextRange,
        content: String,
    ) {
        let line = finding.location.as_ref().map_or(0, |l| l.line);
        self.edits.push(Edit {
            code: finding.code.clone(),
            line,
            start: range.start().to_usize(),
            end: range.end().to_usize(),
            content,
        });
        self.report(finding);
    }

    pub fn report(&mut self, finding: Finding) {
        let mut f = finding;
        f.id = String::new();
        self.findings.push(f);
    }

    /// `name` is called or used as a module or an optimizer in the file (see `models`).
    pub fn runs_as_model(&self, name: &str) -> bool {
        self.models.contains(name)
    }

    /// What the file assigns to `name` (see `bindings`), if it assigns it at all.
    pub fn built_by(&self, name: &str) -> Option<&[Option<String>]> {
        self.bindings.get(name).map(Vec::as_slice)
    }

    /// A class of this file that subclasses `nn.Module`.
    pub fn is_module_class(&self, name: &str) -> bool {
        self.module_classes.contains(name)
    }

    /// The enclosing class builds parameters or submodules into `self` (true when unknown).
    pub fn class_holds_parameters(&self) -> bool {
        self.holds.last().copied().unwrap_or(true)
    }

    /// A module built by calling `name` holds no parameter: a class of this file without any,
    /// or a parameter-free torch.nn layer ([`rules::parameter_free`]).
    pub fn builds_parameter_free(&self, name: &str) -> bool {
        let last = name.rsplit('.').next().unwrap_or(name);
        if self.module_classes.contains(last) {
            self.param_free_classes.contains(last)
        } else {
            rules::parameter_free(last)
        }
    }

    /// Inside a class that subclasses `nn.Module`.
    pub fn in_module_class(&self) -> bool {
        self.classes.last().is_some_and(|(_, m)| *m)
    }

    /// Inside `forward` of an `nn.Module` subclass (directly, in a nested function, or in a
    /// method that `forward` calls as `self.method(...)`).
    pub fn in_forward(&self) -> bool {
        self.in_module_class()
            && self
                .functions
                .iter()
                .any(|f| f == "forward" || self.forward_helpers.contains(f))
    }

    /// Is this a call constructing a module (`nn.Linear(...)`, `torch.nn.Conv2d(...)`, or a
    /// Module subclass of this file)?
    pub fn constructs_module(&self, expr: &Expr) -> bool {
        let Some(name) = call_name(expr) else {
            return false;
        };
        let last = name.rsplit('.').next().unwrap_or(&name);
        let nn = (name.starts_with("nn.") || name.starts_with("torch.nn."))
            && last.chars().next().is_some_and(char::is_uppercase);
        let functional = name.contains(".functional.")
            || name.starts_with("nn.init")
            || name.starts_with("nn.utils");
        (nn && !functional && last != "Parameter" && last != "Buffer" && !last.ends_with("Error"))
            || self.module_classes.contains(&name)
            || self.module_factories.contains(&name)
    }
}

/// Every assignment of `self.<attr>` in class `c` builds a parameter-free module.
fn self_built_parameter_free(ck: &Checker, c: &ruff_python_ast::StmtClassDef, attr: &str) -> bool {
    struct Built<'x, 'y> {
        ck: &'x Checker<'y>,
        attr: &'x str,
        free: Option<bool>,
    }
    impl<'a> Visitor<'a> for Built<'_, '_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if let Stmt::Assign(a) = s {
                let mine = a.targets.iter().any(|t| {
                    matches!(t, Expr::Attribute(at) if at.attr.id.as_str() == self.attr
                        && matches!(at.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self"))
                });
                if mine {
                    let free =
                        call_name(&a.value).is_some_and(|n| self.ck.builds_parameter_free(&n));
                    self.free = Some(self.free.unwrap_or(true) && free);
                }
            }
            if !matches!(s, Stmt::ClassDef(_)) {
                visitor::walk_stmt(self, s);
            }
        }
    }
    let mut b = Built {
        ck,
        attr,
        free: None,
    };
    for s in &c.body {
        b.visit_stmt(s);
    }
    b.free == Some(true)
}

/// How the file's top-level imports name `torch.nn`.
fn nn_prefix(body: &[Stmt]) -> Option<String> {
    let mut torch = false;
    for s in body {
        match s {
            Stmt::Import(i) => {
                for a in &i.names {
                    match (a.name.id.as_str(), a.asname.as_ref().map(|n| n.id.as_str())) {
                        ("torch.nn", Some(alias)) => return Some(alias.to_owned()),
                        ("torch", None) | ("torch.nn", None) => torch = true,
                        _ => {}
                    }
                }
            }
            Stmt::ImportFrom(f) if f.module.as_ref().is_some_and(|m| m.id.as_str() == "torch") => {
                for a in &f.names {
                    if a.name.id.as_str() == "nn" {
                        return Some(a.asname.as_ref().map_or("nn", |n| n.id.as_str()).to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    torch.then(|| "torch.nn".to_owned())
}

/// Does a function body return a newly constructed module?
fn returns_module(ck: &Checker, body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Return(r) => r.value.as_ref().is_some_and(|v| ck.constructs_module(v)),
        _ => false,
    })
}

/// Methods reachable from `forward`: called (`self.method(...)`) or passed as a value to what
/// calls them (`apply_chunking_to_forward(self.ff_chunk, ...)`, `checkpoint(self.inner, x)`).
fn forward_helpers(c: &ruff_python_ast::StmtClassDef) -> HashSet<String> {
    struct Calls(Vec<String>);
    impl<'a> Visitor<'a> for Calls {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Attribute(a) = e {
                if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") {
                    self.0.push(a.attr.id.to_string());
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    let methods: std::collections::HashMap<&str, &ruff_python_ast::StmtFunctionDef> = c
        .body
        .iter()
        .filter_map(|s| match s {
            Stmt::FunctionDef(f) => Some((f.name.id.as_str(), f)),
            _ => None,
        })
        .collect();
    let mut out = HashSet::new();
    let mut todo = vec!["forward"];
    while let Some(m) = todo.pop() {
        let Some(f) = methods.get(m) else { continue };
        let mut calls = Calls(Vec::new());
        for s in &f.body {
            calls.visit_stmt(s);
        }
        for callee in calls.0 {
            if let Some((name, _)) = methods.get_key_value(callee.as_str()) {
                if *name != "forward" && *name != "__init__" && out.insert((*name).to_owned()) {
                    todo.push(name);
                }
            }
        }
    }
    out
}

impl<'a> Visitor<'a> for Checker<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::ClassDef(c) => {
                let is_module = self.module_classes.contains(c.name.id.as_str());
                self.classes.push((c.name.id.to_string(), is_module));
                let mut attrs = HashSet::new();
                let mut has_init = false;
                for s in &c.body {
                    if let Stmt::FunctionDef(f) = s {
                        has_init |= f.name.id.as_str() == "__init__";
                        crate::flow::collect_self_modules(self, &f.body, &mut attrs);
                    }
                }
                // (No `__init__` of its own: whatever a base builds, unless the base is
                // `nn.Module` itself and nothing registers a parameter: DETR's `PostProcess`.)
                let param_free = self.param_free_classes.contains(c.name.id.as_str());
                self.holds
                    .push(!param_free && (!has_init || !attrs.is_empty()));
                let mut fills = ClassFills::default();
                for s in &c.body {
                    if let Stmt::FunctionDef(f) = s {
                        let own = rules::unregistered::local_module_lists(self, &f.body);
                        fills.all.merge_self(own.clone());
                        fills.methods.insert(f.range.start().to_u32(), own);
                    }
                }
                self.class_fills.push(fills);
                let saved = std::mem::replace(&mut self.forward_helpers, forward_helpers(c));
                visitor::walk_stmt(self, stmt);
                self.forward_helpers = saved;
                self.classes.pop();
                self.holds.pop();
                self.class_fills.pop();
                return;
            }
            Stmt::FunctionDef(f) => {
                rules::no_grad_forward::check(self, f);
                rules::backward_in_no_grad::check_function(self, f);
                self.functions.push(f.name.id.to_string());
                rules::zero_grad_order::check(self, &f.body);
                rules::grad_cleared::check(self, &f.body);
                rules::step_before_backward::check(self, &f.body);
                rules::grad_without_create_graph::check(self, &f.body);
                rules::frozen_then_optimized::check(self, &f.body);
                rules::peft_unfreeze::check(self, &f.body);
                let replacing = std::mem::take(&mut self.replacing);
                let held = std::mem::take(&mut self.held);
                let class = self.classes.last().map(|(c, _)| c.clone());
                rules::optimizer_before_replace::check(
                    self,
                    &f.body,
                    &replacing,
                    &held,
                    class.as_deref(),
                );
                self.replacing = replacing;
                self.held = held;
                rules::inplace_saved::check(self, f);
                rules::data_attr::check(self, f);
                rules::stale_graph::check_block(self, &f.body);
                // A method's own was read with its class (see `ClassFills`).
                let own = self
                    .class_fills
                    .last_mut()
                    .and_then(|c| c.methods.remove(&f.range.start().to_u32()));
                let mut lists =
                    own.unwrap_or_else(|| rules::unregistered::local_module_lists(self, &f.body));
                if let Some(class) = self.class_fills.last() {
                    lists.merge_self(class.all.clone());
                }
                self.module_lists.push(lists);
                visitor::walk_stmt(self, stmt);
                self.module_lists.pop();
                self.functions.pop();
                return;
            }
            Stmt::For(f) => {
                rules::update_discarded::check(self, f);
                rules::zero_grad_order::check(self, &f.body);
                rules::grad_cleared::check(self, &f.body);
                rules::step_before_backward::check(self, &f.body);
                rules::stale_graph::check(
                    self,
                    &rules::stale_graph::loop_targets(&f.target),
                    &f.body,
                );
            }
            Stmt::While(w) => {
                rules::zero_grad_order::check(self, &w.body);
                rules::grad_cleared::check(self, &w.body);
                rules::step_before_backward::check(self, &w.body);
                rules::stale_graph::check(self, &[], &w.body);
            }
            Stmt::With(w) => rules::backward_in_no_grad::check(self, w),
            Stmt::Expr(e) => {
                rules::step_not_called::check(self, e);
                rules::backward_not_called::check(self, e);
                rules::zero_grad_not_called::check(self, e);
            }
            Stmt::Assign(a) => {
                rules::update_discarded::param_list(self, a);
                rules::unregistered::check(self, a);
                rules::non_leaf_param::check(self, a);
                rules::non_diff_in_loss::check(self, stmt);
                rules::loss_rewrap::check_assign(self, a);
            }
            _ => {}
        }
        visitor::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if let Expr::Call(_) = expr {
            rules::recreated_module::check(self, expr);
            rules::buffer_not_param::check(self, expr);
            rules::loss_rewrap::check(self, expr);
            rules::grad_clip_zero::check(self, expr);
            rules::hook_zeroes_grad::check(self, expr);
        }
        visitor::walk_expr(self, expr);
    }
}
