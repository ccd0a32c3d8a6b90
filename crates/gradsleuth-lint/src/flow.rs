//! A small data flow over one file: which modules' outputs reach each `backward()` and each
//! `forward` return, and which reach them only through a cut (`.detach()`, `.data`, `.item()`,
//! `torch.tensor(t)`, a `no_grad` block, a non-differentiable op).
//!
//! Values are described by [`Deps`]: the *sources* they depend on differentiably (`live`) and
//! those whose gradient path was cut (`cut`, with every cut's kind and place). Sources are
//! names: modules bound in the file (`model = Net()`), a module class's submodules and
//! parameters (`self.encoder`), and function parameters, which a call site replaces by the
//! arguments' own dependencies (a function is summarised once, by what its return value
//! depends on). Branches and loops merge (an assignment inside them adds to what a name held),
//! but every live source and every cut keeps the path condition it was made under
//! ([`crate::path`]: which arm of which `if`).
//!
//! A cut is reported only when its source reaches *no* gradient path that the same call can
//! take: for a `backward()`, the source is live in no `backward()` of the file on a compatible
//! path and its parameters are given to an optimizer in the file (so a GAN's `fake.detach()`,
//! a DQN's target network, an EMA teacher are not reported); for a `forward` return, the
//! submodule is live in no return of that `forward` on a compatible path and is not named as a
//! teacher/target/EMA copy.

use std::collections::{BTreeMap, HashMap, HashSet};

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{
    Comprehension, Expr, ModModule, Parameters, Stmt, StmtClassDef, StmtFunctionDef,
};
use ruff_text_size::{Ranged, TextRange};

use crate::checker::{disables_grad, dotted, Checker};
use crate::path::{is_deliberate, Ctx, Paths, FALSE, TRUE};

/// How a gradient path was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CutKind {
    /// `.detach()`
    Detach,
    /// `.data`
    Data,
    /// `.item()`, `.tolist()`, `.numpy()`, `float(t)`, `np.array(t)`
    Item,
    /// `torch.tensor(t)` / `torch.as_tensor(t)` of a tensor that has history
    Rewrap,
    /// a `with torch.no_grad()` block or a `@torch.no_grad()` function
    NoGrad,
    /// argmax, rounding, integer casts, comparisons
    NonDiff,
    /// the result of `torch.autograd.grad(...)` without `create_graph=True`
    NoCreateGraph,
}

/// One cut: its kind and the code that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cut {
    pub kind: CutKind,
    pub start: u32,
    pub end: u32,
}

impl Cut {
    fn new(kind: CutKind, range: TextRange) -> Self {
        Cut {
            kind,
            start: range.start().to_u32(),
            end: range.end().to_u32(),
        }
    }
    pub fn range(&self) -> TextRange {
        TextRange::new(self.start.into(), self.end.into())
    }
}

/// A reported cut: where, what kind, which source lost its gradient, and what it fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowCut {
    pub cut: Cut,
    /// The module (or submodule) whose output reached the loss only through the cut.
    pub source: String,
    /// `true`: the value fed a `forward` return; `false`: a `backward()`.
    pub in_forward: bool,
}

/// The pseudo-source of values made under `torch.inference_mode()`.
pub const INFERENCE: &str = "<inference tensor>";
/// The pseudo-source of a module built under `torch.inference_mode()`: its parameters are
/// inference tensors.
pub const INFERENCE_PARAMS: &str = "<module built under inference_mode>";

const MAX_SOURCES: usize = 64;
const MAX_CUTS: usize = 8;

/// What a value depends on, each source and cut with the path condition it was made under.
#[derive(Debug, Default, Clone)]
struct Deps {
    live: BTreeMap<String, Paths>,
    cut: BTreeMap<String, BTreeMap<Cut, Ctx>>,
}

impl Deps {
    fn source(name: &str, path: &Ctx) -> Self {
        let mut d = Deps::default();
        d.live.insert(name.to_owned(), Paths::one(path.clone()));
        d
    }

    fn add_live(&mut self, source: String, ctx: Paths) {
        let room = self.live.len() < MAX_SOURCES;
        match self.live.get_mut(&source) {
            Some(c) => c.or(ctx),
            None if room => {
                self.live.insert(source, ctx);
            }
            None => {}
        }
    }

    fn union(&mut self, other: Deps) {
        for (s, ctx) in other.live {
            self.add_live(s, ctx);
        }
        for (s, cuts) in other.cut {
            self.add_cuts(s, cuts);
        }
    }

    fn add_cuts(&mut self, source: String, cuts: BTreeMap<Cut, Ctx>) {
        if self.cut.len() >= MAX_SOURCES && !self.cut.contains_key(&source) {
            return;
        }
        let entry = self.cut.entry(source).or_default();
        for (c, ctx) in cuts {
            let room = entry.len() < MAX_CUTS;
            match entry.get_mut(&c) {
                Some(old) => old.either(&ctx),
                None if room => {
                    entry.insert(c, ctx);
                }
                None => {}
            }
        }
    }

    /// Every live source becomes cut by `cuts` (on the paths where both hold).
    fn cut_by(mut self, cuts: &BTreeMap<Cut, Ctx>) -> Deps {
        for (s, sctx) in std::mem::take(&mut self.live) {
            let both: BTreeMap<Cut, Ctx> = cuts
                .iter()
                .filter_map(|(c, cctx)| sctx.and(cctx).map(|x| (*c, x.joined())))
                .collect();
            self.add_cuts(s, both);
        }
        self
    }

    /// Everything here, on the paths that also satisfy `ctx` (what cannot is dropped).
    fn constrain(self, ctx: &Ctx) -> Deps {
        self.returned(ctx, &[])
    }

    /// A value a `return` gives on `path`. A cut made in an arm that ends in that return is
    /// an alternative output of the function, a mode (`if return_features: return
    /// feats.detach()`), not a rival of the computation after the `if`: the tests of such
    /// arms (`free`) do not constrain its cuts.
    fn returned(self, path: &Ctx, free: &[u64]) -> Deps {
        let cut_path = path.without(free);
        let mut out = Deps::default();
        for (s, c) in self.live {
            if let Some(c) = c.and(path) {
                out.add_live(s, c);
            }
        }
        for (s, cuts) in self.cut {
            let cuts = cuts
                .into_iter()
                .filter_map(|(cut, c)| c.without(free).and(&cut_path).map(|c| (cut, c)))
                .collect();
            out.add_cuts(s, cuts);
        }
        out
    }

    /// A callee's summary as seen from one call (see [`Ctx::at_call`]).
    fn at_call(self, site: u64, repeated: bool) -> Deps {
        Deps {
            live: self
                .live
                .into_iter()
                .map(|(s, c)| (s, c.at_call(site, repeated)))
                .collect(),
            cut: self
                .cut
                .into_iter()
                .map(|(s, cuts)| {
                    let cuts = cuts
                        .into_iter()
                        .map(|(cut, c)| (cut, c.at_call(site, repeated)))
                        .collect();
                    (s, cuts)
                })
                .collect(),
        }
    }

    /// `self` and its parts (`self.critic`) as `owner`'s (`agent.critic`): a method's summary
    /// seen from a call on an instance.
    fn rebased(self, owner: &str) -> Deps {
        let re = |s: String| match s.strip_prefix("self") {
            Some(rest) if rest.is_empty() || rest.starts_with('.') => format!("{owner}{rest}"),
            _ => s,
        };
        Deps {
            live: self.live.into_iter().map(|(s, c)| (re(s), c)).collect(),
            cut: self.cut.into_iter().map(|(s, c)| (re(s), c)).collect(),
        }
    }

    /// The value is exactly the source `name` (a model bound to a name).
    fn is_whole(&self, name: &str) -> bool {
        self.cut.is_empty() && self.live.len() == 1 && self.live.contains_key(name)
    }

    /// `part` of what this value is (`.bert` of a model passed in): a source of its own when
    /// the value is one whole source, the value itself otherwise.
    fn part(self, part: Option<&str>) -> Deps {
        match part {
            Some(p) if self.cut.is_empty() && self.live.len() == 1 => {
                let (whole, ctx) = self.live.into_iter().next().unwrap_or_default();
                let mut d = Deps::default();
                d.live.insert(format!("{whole}.{p}"), ctx);
                d
            }
            _ => self,
        }
    }

    /// Every source, live or cut, cut by this one cut alone.
    fn cut_only(self, kind: CutKind, range: TextRange) -> Deps {
        let cut = BTreeMap::from([(Cut::new(kind, range), Ctx::default())]);
        let mut out = Deps::default();
        for s in self.live.into_keys().chain(self.cut.into_keys()) {
            out.cut.insert(s, cut.clone());
        }
        out
    }

    fn cut_all(self, kind: CutKind, range: TextRange, path: &Ctx) -> Deps {
        if self.live.is_empty() {
            return self;
        }
        self.cut_by(&BTreeMap::from([(Cut::new(kind, range), path.clone())]))
    }
}

/// Per-function evaluation state.
struct Frame {
    env: HashMap<String, Deps>,
    class: Option<String>,
    no_grad: Option<TextRange>,
    /// The `no_grad` block is `torch.inference_mode()`: what it makes are inference tensors.
    inference: bool,
    returns: Deps,
    /// The function returns a loss a framework calls backward on, maybe with more beside it
    /// (`(loss, outputs)`, `{"loss": loss, ...}`): only the loss counts as returned.
    loss_return: bool,
    /// The `if` outcomes on the path to the statement being evaluated.
    path: Ctx,
    /// How many loops (of this function) enclose it: a test inside one constrains nothing.
    loops: u32,
    /// The tests of the enclosing arms that end in a `return` (see [`Deps::returned`]).
    free: Vec<u64>,
    /// The module's own code: a function it calls reads its globals as they are bound here.
    top: bool,
}

impl Frame {
    fn bind(&mut self, name: &str, d: Deps) {
        self.env.insert(name.to_owned(), d);
    }
}

/// After alternatives (branches, a loop that may run again or not at all): a name holds what
/// any of them left in it.
fn merge_env(into: &mut HashMap<String, Deps>, other: HashMap<String, Deps>) {
    for (k, v) in other {
        match into.get_mut(&k) {
            Some(d) => d.union(v),
            None => {
                into.insert(k, v);
            }
        }
    }
}

type FnKey = usize;

fn key(f: &StmtFunctionDef) -> FnKey {
    f as *const StmtFunctionDef as usize
}

/// The function parameter a summary's source stands for, and the part of it named
/// (`model.bert` of the parameter `model`).
fn of_param<'s>(source: &'s str, params: &HashSet<String>) -> Option<(&'s str, Option<&'s str>)> {
    let (root, part) = match source.split_once('.') {
        Some((r, p)) => (r, Some(p)),
        None => (source, None),
    };
    params.contains(root).then_some((root, part))
}

/// (class, attribute) for each part of a module that a module holding it uses by name: a
/// method of `Holder` reads `self.sub.attribute` where `Holder` builds `self.sub = Class(...)`.
fn reached_through_submodules(module: &ModModule) -> HashSet<(String, String)> {
    #[derive(Default)]
    struct V {
        /// `self.sub` -> the class of this file it is built from.
        built: HashMap<String, String>,
        /// (`sub`, `attribute`) read as `self.sub.attribute`.
        read: Vec<(String, String)>,
    }
    impl<'a> Visitor<'a> for V {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if let Stmt::Assign(a) = s {
                if let (Some(class), [Expr::Attribute(t)]) =
                    (crate::checker::call_name(&a.value), a.targets.as_slice())
                {
                    if matches!(t.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") {
                        let last = class.rsplit('.').next().unwrap_or(&class).to_owned();
                        self.built.insert(t.attr.id.to_string(), last);
                    }
                }
            }
            visitor::walk_stmt(self, s);
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Attribute(a) = e {
                if let Expr::Attribute(sub) = a.value.as_ref() {
                    if matches!(sub.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") {
                        self.read
                            .push((sub.attr.id.to_string(), a.attr.id.to_string()));
                    }
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut out = HashSet::new();
    for s in &module.body {
        if let Stmt::ClassDef(c) = s {
            let mut v = V::default();
            for st in &c.body {
                v.visit_stmt(st);
            }
            for (sub, attr) in v.read {
                if let Some(class) = v.built.get(&sub).filter(|k| **k != c.name.id.as_str()) {
                    out.insert((class.clone(), attr));
                }
            }
        }
    }
    out
}

/// One source is the other or a part of it (`model` and `model.bert`): a model is live when
/// any part of it is, and a part when the whole is.
fn overlaps(a: &str, b: &str) -> bool {
    let within = |x: &str, y: &str| x.strip_prefix(y).is_some_and(|r| r.starts_with('.'));
    a == b || within(a, b) || within(b, a)
}

/// Names a model copy that is not trained by backprop (teacher, target network, EMA).
fn is_untrained_copy(source: &str) -> bool {
    let s = source.to_ascii_lowercase();
    [
        "teacher", "target", "ema", "momentum", "frozen", "old", "ref", "prior", "fixed",
    ]
    .iter()
    .any(|w| s.contains(w))
}

const ITEM_METHODS: &[&str] = &["item", "tolist", "numpy"];
const NON_DIFF_METHODS: &[&str] = &[
    "argmax", "argmin", "round", "floor", "ceil", "sign", "long", "int", "bool", "argsort",
];
/// Ops returning `(values, indices)`: the values keep their history, the indices have none.
const VALUES_INDICES: &[&str] = &[
    "max",
    "min",
    "topk",
    "sort",
    "kthvalue",
    "median",
    "nanmedian",
    "mode",
    "cummax",
    "cummin",
];

/// `e` is a call of an op returning `(values, indices)` (`x.max(-1)`, `torch.topk(x, 2)`):
/// `max`/`min`/`median` only with a dimension given as a number or `dim=` (`x.max()` returns
/// one tensor, `torch.max(a, b)` the elementwise maximum).
fn values_indices(e: &Expr) -> bool {
    let Expr::Call(c) = e else { return false };
    let Expr::Attribute(a) = c.func.as_ref() else {
        return false;
    };
    let op = a.attr.id.as_str();
    if !VALUES_INDICES.contains(&op) {
        return false;
    }
    if !matches!(op, "max" | "min" | "median" | "nanmedian") {
        return true;
    }
    let namespace = matches!(dotted(&a.value).as_deref(), Some("torch"));
    let int = |e: &Expr| match e {
        Expr::NumberLiteral(_) => true,
        Expr::UnaryOp(u) => matches!(u.operand.as_ref(), Expr::NumberLiteral(_)),
        _ => false,
    };
    c.arguments
        .args
        .get(usize::from(namespace))
        .is_some_and(int)
        || c.arguments
            .keywords
            .iter()
            .any(|k| k.arg.as_ref().is_some_and(|n| n.as_str() == "dim"))
}

/// Tensor metadata: no gradient flows through it.
pub(crate) const SHAPE_ATTRS: &[&str] = &[
    "shape",
    "device",
    "dtype",
    "ndim",
    "is_cuda",
    "requires_grad",
    "grad_fn",
    "layout",
];
pub(crate) const SHAPE_METHODS: &[&str] =
    &["size", "dim", "numel", "stride", "get_device", "data_ptr"];
/// Methods whose arguments give only a dtype, device or shape (`x.to(other)`,
/// `x.type_as(other)`): the gradient goes to the receiver alone.
pub(crate) const LIKE_METHODS: &[&str] = &["to", "type_as", "view_as", "expand_as", "reshape_as"];
const OPAQUE_BUILTINS: &[&str] = &[
    "len",
    "isinstance",
    "print",
    "range",
    "str",
    "repr",
    "type",
    "hasattr",
    "id",
    "hash",
    "format",
    "open",
    "callable",
    "issubclass",
];

/// A learning-rate schedule or a weight average built by `name` (`LambdaLR`, `OneCycleLR`,
/// `ReduceLROnPlateau`, transformers' and diffusers' `get_scheduler`,
/// `get_cosine_schedule_with_warmup`; SWA's `AveragedModel`, diffusers' `EMAModel`, timm's
/// `ModelEmaV3`, `ExponentialMovingAverage`): it has a `step()` that applies no gradient.
pub(crate) fn is_schedule_ctor(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    name.contains("lr_scheduler")
        || name.contains("swa_utils")
        || last.ends_with("LR")
        || last.starts_with("LR")
        || last.contains("Scheduler")
        || last.contains("Plateau")
        || last.contains("WarmRestarts")
        || (last.starts_with("get_") && last.contains("schedule"))
        || last.contains("EMA")
        || last.contains("Ema")
        || last.contains("MovingAverage")
        || last.contains("AveragedModel")
}

pub(crate) fn is_optimizer_ctor(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    // `from torch.optim import AdamW`: torch's optimizers by their own names.
    const TORCH_OPTIMIZERS: &[&str] = &[
        "SGD",
        "Adam",
        "AdamW",
        "Adamax",
        "Adadelta",
        "Adagrad",
        "Adafactor",
        "ASGD",
        "LBFGS",
        "NAdam",
        "RAdam",
        "RMSprop",
        "Rprop",
        "SparseAdam",
        "Muon",
    ];
    // Not a learning-rate schedule (`torch.optim.lr_scheduler.LambdaLR`, `OneCycleLR`,
    // `ReduceLROnPlateau`, `CosineAnnealingWarmRestarts`) nor SWA's averaged copy
    // (`torch.optim.swa_utils.AveragedModel`, `SWALR`): they wrap an optimizer or a model.
    let schedule = is_schedule_ctor(name);
    TORCH_OPTIMIZERS.contains(&last)
        || (name.contains("optim.") || name.starts_with("optim"))
            && last.chars().next().is_some_and(char::is_uppercase)
            && !schedule
}

/// The data flow over a file.
pub struct Flow<'a, 'c> {
    ck: &'c Checker<'a>,
    functions: HashMap<String, &'a StmtFunctionDef>,
    methods: HashMap<(String, String), &'a StmtFunctionDef>,
    /// Per module class: attributes assigned a module or a parameter.
    class_attrs: HashMap<String, HashSet<String>>,
    /// Every class of the file by name: a module class inherits the submodules its base
    /// classes of this file build (PEFT's `LoraLayer` mixin builds `lora_A`, `lora_B` for
    /// `lora.Linear(nn.Module, LoraLayer)`).
    class_defs: HashMap<String, &'a StmtClassDef>,
    module_vars: HashSet<String>,
    summaries: HashMap<FnKey, Deps>,
    /// The backwards a function runs (itself or through what it calls), in terms of its
    /// parameters: each call runs them on its arguments (`def train(model, opt, protos)`
    /// called with a model built under `inference_mode`, prototypes computed before the loop).
    fn_backwards: HashMap<FnKey, Vec<Deps>>,
    in_progress: HashSet<FnKey>,
    backwards: Vec<Deps>,
    /// Each module class's `forward` return, by class.
    forward_returns: Vec<(String, Deps)>,
    /// (class, attribute): a module holding one of `class` uses its `attribute` by name
    /// ([`reached_through_submodules`]).
    reached: HashSet<(String, String)>,
    /// Dotted names (and their prefixes) that appear in an optimizer's arguments.
    optimized: HashSet<String>,
    /// Methods whose return value is the loss a framework calls backward on, beside
    /// Lightning's `training_step`: a Hugging Face `Trainer` subclass's `compute_loss`.
    loss_methods: HashSet<FnKey>,
    /// (class, attribute) -> the class of this file it is built from in `__init__`
    /// (`self.classifier = ElectraClassificationHead(config)`): calling it runs that
    /// class's `forward`, whose cuts of its inputs apply to what the caller passes.
    sub_classes: HashMap<(String, String), String>,
    /// (class, attribute) -> the `__init__` parameter (name, position after `self`) it is
    /// built by calling (`self.downsample = downsample(dim)`): the class passed there, where
    /// the file constructs the class, is what `sub_classes` gets.
    ctor_args: HashMap<(String, String), (String, usize)>,
    /// `self.X` a class freezes itself (`self.esm.requires_grad_(False)`, a loop setting
    /// `requires_grad = False` over `self.X.parameters()`): a cut of it is deliberate.
    frozen: HashSet<String>,
    /// Classes of this file whose every parameter and submodule they freeze themselves
    /// (transformers' `Ernie4_5_MoeStatics`: one `nn.Parameter(..., requires_grad=False)`):
    /// an attribute built from one is frozen too.
    frozen_classes: HashSet<String>,
    /// (class, attribute) known as a submodule only by being called and built by a call
    /// (`self.matcher = det_utils.Matcher(...)`): it may be a plain callable object with no
    /// parameters (a detector's anchor matcher), so an index it computes is no cut of its.
    called_only: HashSet<(String, String)>,
    /// Names bound (anywhere in the file, always) to an instance of one module class of
    /// the file (`agent = Agent(envs).to(device)`): a method called on one runs that
    /// class's method on its parts (`agent.get_value(x)` runs `agent.critic`).
    var_classes: HashMap<String, String>,
    /// Names bound (only) to an instance of a class of the file that is no module (a trainer
    /// of the script's own), with its class.
    plain_vars: HashMap<String, String>,
}

struct Dotted(Vec<String>);

impl<'a> Visitor<'a> for Dotted {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Some(d) = dotted(e) {
            self.0.push(d);
        }
        visitor::walk_expr(self, e);
    }
}

/// Whose parameters are asked for (`X.parameters()` / `X.named_parameters()`): plain names
/// (`model`), and the attributes `X` of `self.X.parameters()`.
#[derive(Default)]
struct AskedParameters {
    names: HashSet<String>,
    self_attrs: HashSet<String>,
}

impl<'a> Visitor<'a> for AskedParameters {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            if let Expr::Attribute(a) = c.func.as_ref() {
                if matches!(a.attr.id.as_str(), "parameters" | "named_parameters") {
                    match a.value.as_ref() {
                        Expr::Name(n) if n.id.as_str() != "self" => {
                            self.names.insert(n.id.to_string());
                        }
                        v => {
                            if let Some(attr) = dotted(v)
                                .as_deref()
                                .and_then(|d| d.strip_prefix("self."))
                                .filter(|x| !x.contains('.'))
                            {
                                self.self_attrs.insert(attr.to_owned());
                            }
                        }
                    }
                }
            }
        }
        visitor::walk_expr(self, e);
    }
}

/// `self.X = P(...)` anywhere in a constructor (under an `if` too), `P` one of its parameters:
/// (X, P).
struct CtorArgCalls(HashSet<String>, Vec<(String, String)>);

impl<'a> Visitor<'a> for CtorArgCalls {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if let Stmt::Assign(a) = s {
            // `P(...)`, or `P(...) if P is not None else None`.
            let call = match a.value.as_ref() {
                Expr::If(i) => match (i.body.as_ref(), i.orelse.as_ref()) {
                    (Expr::Call(c), _) | (_, Expr::Call(c)) => Some(c),
                    _ => None,
                },
                Expr::Call(c) => Some(c),
                _ => None,
            };
            if let Some(c) = call {
                if let Expr::Name(p) = c.func.as_ref() {
                    if self.0.contains(p.id.as_str()) {
                        for t in &a.targets {
                            if let Some(attr) =
                                dotted(t).and_then(|d| d.strip_prefix("self.").map(str::to_owned))
                            {
                                if !attr.contains('.') {
                                    self.1.push((attr, p.id.to_string()));
                                }
                            }
                        }
                    }
                }
            }
        }
        if !matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
            visitor::walk_stmt(self, s);
        }
    }
}

/// Calls anywhere in the file of the classes named (by the last part of the callee).
struct ClassCalls<'a>(
    HashSet<String>,
    Vec<(String, &'a ruff_python_ast::ExprCall)>,
);

impl<'a> Visitor<'a> for ClassCalls<'a> {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            if let Some(d) = dotted(&c.func) {
                let last = d.rsplit('.').next().unwrap_or(&d).to_owned();
                if self.0.contains(&last) {
                    self.1.push((last, c));
                }
            }
        }
        visitor::walk_expr(self, e);
    }
}

/// The class names an argument may be: `A`, `A if cond else B`, `None`.
fn class_choices(e: &Expr, out: &mut Vec<String>) {
    match e {
        Expr::If(i) => {
            class_choices(&i.body, out);
            class_choices(&i.orelse, out);
        }
        Expr::NoneLiteral(_) => out.push("None".to_owned()),
        _ => match dotted(e) {
            Some(d) => out.push(d.rsplit('.').next().unwrap_or(&d).to_owned()),
            None => out.push(String::new()),
        },
    }
}

/// What plain names are given, anywhere in the file: `params = [...]`, `params += [...]`,
/// what is put into them ([`container_put`]: `params.extend(...)`, `.append(...)`; an
/// optimizer built from `params` gets those).
#[derive(Default)]
struct NameValues<'a>(HashMap<String, Vec<&'a Expr>>);

impl<'a> Visitor<'a> for NameValues<'a> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::Assign(a) => {
                for t in &a.targets {
                    if let Expr::Name(n) = t {
                        self.0.entry(n.id.to_string()).or_default().push(&a.value);
                    }
                }
            }
            Stmt::AugAssign(a) => {
                if let Expr::Name(n) = a.target.as_ref() {
                    self.0.entry(n.id.to_string()).or_default().push(&a.value);
                }
            }
            _ => {}
        }
        visitor::walk_stmt(self, s);
    }
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Some((name, put)) = container_put(e) {
            self.0.entry(name.to_owned()).or_default().extend(put);
        }
        visitor::walk_expr(self, e);
    }
}

struct OptimizerArgs<'v, 'a>(HashSet<String>, &'v NameValues<'a>);

impl OptimizerArgs<'_, '_> {
    /// The dotted names in `e`, through the values of plain names given them (`params` in
    /// `SGD(params)`, built as a list of several models' parameters). A name only asked for
    /// its parameters (`SGD(clf.parameters())`) is read one level down, without following the
    /// names there: a wrapper's argument is the model (`clf = DDP(net)`), a constructor's
    /// are its configuration (`LinearClassifier(embed_dim)`, where `embed_dim` is read from
    /// a frozen backbone's attributes: DINO's linear evaluation).
    fn names_in(&self, e: &Expr, out: &mut Vec<String>, seen: &mut HashSet<String>) {
        let mut names = Dotted(Vec::new());
        names.visit_expr(e);
        let mut whole = WholeNames(HashSet::new());
        whole.visit_expr(e);
        for n in names.0 {
            if !n.contains('.') && seen.insert(n.clone()) {
                for v in self.1 .0.get(&n).into_iter().flatten() {
                    if is_new_leaf(v) {
                        // The optimizer trains the leaf itself (Imagic's text embeddings,
                        // an adversarial input), not what its first value was copied from.
                        continue;
                    }
                    if whole.0.contains(&n) {
                        self.names_in(v, out, seen);
                    } else {
                        let mut inner = Dotted(Vec::new());
                        inner.visit_expr(v);
                        out.extend(inner.0);
                    }
                }
            }
            out.push(n);
        }
    }
}

/// A value that starts a new leaf: `nn.Parameter(t)`, `torch.tensor(t)`, or a chain through
/// `.detach()` (`t.detach().clone().requires_grad_()`).
fn is_new_leaf(v: &Expr) -> bool {
    let mut e = v;
    while let Expr::Call(c) = e {
        match c.func.as_ref() {
            Expr::Attribute(a) if matches!(a.attr.id.as_str(), "detach" | "detach_") => {
                return true
            }
            Expr::Attribute(a)
                if matches!(
                    a.attr.id.as_str(),
                    "requires_grad_" | "clone" | "to" | "float" | "half" | "contiguous"
                ) =>
            {
                e = &a.value;
            }
            f => {
                return dotted(f).is_some_and(|n| {
                    n.rsplit('.').next() == Some("Parameter")
                        || matches!(n.as_str(), "torch.tensor" | "torch.as_tensor")
                })
            }
        }
    }
    false
}

/// The plain names an expression uses as values, not only as the base of an attribute.
struct WholeNames(HashSet<String>);

impl<'a> Visitor<'a> for WholeNames {
    fn visit_expr(&mut self, e: &'a Expr) {
        match e {
            Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(_)) => {}
            Expr::Name(n) => {
                self.0.insert(n.id.to_string());
            }
            _ => visitor::walk_expr(self, e),
        }
    }
}

impl<'a> Visitor<'a> for OptimizerArgs<'_, '_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            if dotted(&c.func).is_some_and(|n| is_optimizer_ctor(&n)) {
                let mut names = Vec::new();
                let mut seen = HashSet::new();
                for a in c.arguments.args.iter() {
                    self.names_in(a, &mut names, &mut seen);
                }
                for k in &c.arguments.keywords {
                    self.names_in(&k.value, &mut names, &mut seen);
                }
                for n in names {
                    // `self.parameters()` hands over everything under `self` (a
                    // LightningModule's `configure_optimizers`): its layers count as given.
                    for suffix in [".parameters", ".named_parameters"] {
                        if let Some(owner) = n.strip_suffix(suffix) {
                            self.0.insert(format!("{owner}.*"));
                        }
                    }
                    let mut prefix = String::new();
                    for part in n.split('.') {
                        if !prefix.is_empty() {
                            prefix.push('.');
                        }
                        prefix.push_str(part);
                        self.0.insert(prefix.clone());
                    }
                }
            }
        }
        visitor::walk_expr(self, e);
    }
}

impl<'a, 'c> Flow<'a, 'c> {
    /// Runs the flow over `module` and returns the cuts to report.
    pub fn run(ck: &'c Checker<'a>, module: &'a ModModule) -> Vec<FlowCut> {
        let mut flow = Flow {
            ck,
            functions: HashMap::new(),
            methods: HashMap::new(),
            class_attrs: HashMap::new(),
            class_defs: module
                .body
                .iter()
                .filter_map(|s| match s {
                    Stmt::ClassDef(c) => Some((c.name.id.to_string(), c)),
                    _ => None,
                })
                .collect(),
            module_vars: HashSet::new(),
            summaries: HashMap::new(),
            fn_backwards: HashMap::new(),
            in_progress: HashSet::new(),
            backwards: Vec::new(),
            forward_returns: Vec::new(),
            reached: reached_through_submodules(module),
            optimized: HashSet::new(),
            loss_methods: HashSet::new(),
            frozen: HashSet::new(),
            frozen_classes: HashSet::new(),
            called_only: HashSet::new(),
            var_classes: HashMap::new(),
            plain_vars: HashMap::new(),
            sub_classes: HashMap::new(),
            ctor_args: HashMap::new(),
        };
        let mut values = NameValues::default();
        for s in &module.body {
            values.visit_stmt(s);
        }
        let mut opt = OptimizerArgs(HashSet::new(), &values);
        for s in &module.body {
            opt.visit_stmt(s);
        }
        flow.optimized = opt.0;
        // A file without backward, forward or optimizer has nothing to report: stay cheap.
        if flow.optimized.is_empty()
            && !ck.source.contains("forward")
            && !ck.source.contains("Trainer")
        {
            return Vec::new();
        }
        for s in &module.body {
            match s {
                Stmt::FunctionDef(f) => {
                    flow.functions.insert(f.name.id.to_string(), f);
                }
                Stmt::ClassDef(c) => flow.index_class(c),
                Stmt::Assign(a) if ck.constructs_module(&a.value) => {
                    for t in &a.targets {
                        if let Expr::Name(n) = t {
                            flow.module_vars.insert(n.id.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        flow.resolve_ctor_args(module);
        flow.var_classes = instances_of_file_classes(module, &|n| ck.is_module_class(n));
        let plain = |n: &str| flow.class_defs.contains_key(n) && !ck.is_module_class(n);
        flow.plain_vars = instances_of_file_classes(module, &plain);
        for ((_, attr), sub) in &flow.sub_classes {
            if flow.frozen_classes.contains(sub) {
                flow.frozen.insert(format!("self.{attr}"));
            }
        }
        // A name whose parameters the file asks for is a model, however it was built
        // (`M.BertForTokenClassification(cfg)`, `load_model()`, `AutoModel.from_config(c)`).
        let mut asked = AskedParameters::default();
        for s in &module.body {
            asked.visit_stmt(s);
        }
        flow.module_vars.extend(asked.names);
        let mut top = Frame {
            env: HashMap::new(),
            class: None,
            no_grad: None,
            inference: false,
            returns: Deps::default(),
            loss_return: false,
            path: Ctx::default(),
            loops: 0,
            free: Vec::new(),
            top: true,
        };
        flow.block(&module.body, &mut top);
        let functions: Vec<&'a StmtFunctionDef> = flow.functions.values().copied().collect();
        for f in functions {
            flow.summary(f, None);
        }
        let methods: Vec<(String, &'a StmtFunctionDef)> = flow
            .methods
            .iter()
            .map(|((c, _), f)| (c.clone(), *f))
            .collect();
        for (c, f) in methods {
            flow.summary(f, Some(&c));
        }
        flow.report()
    }

    /// `e` is a name holding an instance of a module class of the file, as a whole:
    /// (the name, the class).
    fn instance_of(&self, e: &Expr, fr: &Frame) -> Option<(String, String)> {
        let Expr::Name(n) = e else { return None };
        let id = n.id.as_str();
        let class = self.var_classes.get(id)?;
        let whole = match fr.env.get(id) {
            Some(d) => d.is_whole(id),
            None => self.module_vars.contains(id),
        };
        whole.then(|| (id.to_owned(), class.clone()))
    }

    /// `e` builds or names an instance of a class of the file that is no module: its class.
    fn plain_instance(&self, e: &Expr) -> Option<String> {
        match e {
            Expr::Call(c) => dotted(&c.func)
                .filter(|n| self.class_defs.contains_key(n) && !self.ck.is_module_class(n)),
            Expr::Name(n) => self.plain_vars.get(n.id.as_str()).cloned(),
            _ => None,
        }
    }

    /// Every assignment of `self.{attr}` in `class` (or a base of the file) is a literal
    /// (a list, a number, `None`), and it is no submodule or parameter of the class.
    fn plain_attr(&self, class: &str, attr: &str) -> bool {
        if self
            .class_attrs
            .get(class)
            .is_some_and(|a| a.contains(attr))
        {
            return false;
        }
        let Some(c) = self.class_defs.get(class) else {
            return false;
        };
        let mut found = SelfAssigned(attr, Vec::new());
        for s in &c.body {
            found.visit_stmt(s);
        }
        for b in self.file_bases(c) {
            for s in &b.body {
                found.visit_stmt(s);
            }
        }
        !found.1.is_empty() && found.1.iter().all(|v| v.is_some_and(is_literal))
    }

    /// Whether an optimizer of the file is given `source`'s parameters: named itself, or
    /// under an owner whose `parameters()` it is given (`self.encoder` under `self`).
    fn is_optimized(&self, source: &str) -> bool {
        self.optimized.contains(source)
            || source
                .match_indices('.')
                .any(|(i, _)| self.optimized.contains(&format!("{}.*", &source[..i])))
    }

    fn index_class(&mut self, c: &'a StmtClassDef) {
        let name = c.name.id.to_string();
        let is_module = self.ck.is_module_class(&name);
        let mut attrs = HashSet::new();
        let mut handed: HashSet<String> = HashSet::new();
        let method_names: HashSet<String> = c
            .body
            .iter()
            .filter_map(|s| match s {
                Stmt::FunctionDef(f) => Some(f.name.id.to_string()),
                _ => None,
            })
            .collect();
        let mut called = Called {
            methods: &method_names,
            out: HashSet::new(),
        };
        // A Hugging Face `Trainer` subclass (`Trainer`, `Seq2SeqTrainer`, TRL's `SFTTrainer`):
        // the trainer builds the optimizer over the `model` its `compute_loss` and
        // `training_step` are given, and calls backward on what `compute_loss` returns.
        let is_trainer = crate::checker::is_trainer_class(c);
        let mut stateless = HashMap::new();
        let mut asked = AskedParameters::default();
        for s in &c.body {
            if let Stmt::FunctionDef(f) = s {
                self.methods
                    .insert((name.clone(), f.name.id.to_string()), f);
                let method = f.name.id.as_str();
                if is_trainer && matches!(method, "compute_loss" | "training_step") {
                    if let Some(model) = param_names(&f.parameters).get(1) {
                        self.optimized.insert(model.clone());
                        self.optimized.insert(format!("{model}.*"));
                    }
                    if method == "compute_loss" {
                        self.loss_methods.insert(key(f));
                    }
                }
                if is_module && method == "__init__" {
                    let params = param_names(&f.parameters);
                    let mut built =
                        CtorArgCalls(params.iter().skip(1).cloned().collect(), Vec::new());
                    for st in &f.body {
                        built.visit_stmt(st);
                    }
                    for (attr, p) in built.1 {
                        if let Some(i) = params.iter().skip(1).position(|q| *q == p) {
                            self.ctor_args.insert((name.clone(), attr), (p, i));
                        }
                    }
                    for st in &f.body {
                        if let Stmt::Assign(a) = st {
                            let built = dotted_callee(&a.value)
                                .filter(|_| matches!(a.value.as_ref(), Expr::Call(_)));
                            for t in &a.targets {
                                if let (Some(attr), Some(cls)) = (
                                    dotted(t)
                                        .and_then(|d| d.strip_prefix("self.").map(str::to_owned)),
                                    built.as_ref(),
                                ) {
                                    if !attr.contains('.') {
                                        self.sub_classes.insert((name.clone(), attr), cls.clone());
                                    }
                                }
                            }
                        }
                    }
                }
                if is_module {
                    collect_self_modules(self.ck, &f.body, &mut attrs);
                    collect_stateless(&f.body, &mut stateless);
                    if method == "__init__" {
                        for attr in handed_in_modules(self.ck, f) {
                            stateless.insert(attr.clone(), false);
                            handed.insert(attr);
                        }
                    }
                    for st in &f.body {
                        called.visit_stmt(st);
                        asked.visit_stmt(st);
                    }
                }
            }
        }
        if is_module {
            // What the file's base classes build into `self` (their `__init__` run through
            // `super().__init__()` or by name, their helpers called from it).
            let mut seen: HashSet<&str> = HashSet::from([name.as_str()]);
            let mut bases: Vec<&'a StmtClassDef> = self.file_bases(c);
            while let Some(b) = bases.pop() {
                if !seen.insert(b.name.id.as_str()) {
                    continue;
                }
                for s in &b.body {
                    if let Stmt::FunctionDef(f) = s {
                        collect_self_modules(self.ck, &f.body, &mut attrs);
                        collect_stateless(&f.body, &mut stateless);
                    }
                }
                bases.extend(self.file_bases(b));
            }
            let mut frozen = Frozen(HashSet::new());
            for st in &c.body {
                frozen.visit_stmt(st);
            }
            let own_frozen = frozen.0;
            // Submodules built by a factory or a class from another file (`norm_layer(dim)`,
            // `Conv1D(...)`): known by being called. Parameters a torch layer subclass
            // inherits (`class LayerNorm2d(nn.LayerNorm)` reads `self.weight`).
            for a in called.out {
                if stateless.get(&a) == Some(&false) {
                    if !attrs.contains(&a) && !handed.contains(&a) {
                        self.called_only.insert((name.clone(), a.clone()));
                    }
                    attrs.insert(a);
                }
            }
            // A model handed in and kept (`self.model = model`, in a LightningModule or a
            // wrapper around it): known by its parameters being asked for
            // (`self.model.parameters()` in `configure_optimizers`), which no function has.
            attrs.extend(
                asked
                    .self_attrs
                    .into_iter()
                    .filter(|a| !stateless.contains_key(a)),
            );
            if c.arguments.as_ref().is_some_and(|a| {
                a.args.iter().any(|b| {
                    dotted(b).is_some_and(|n| {
                        let last = n.rsplit('.').next().unwrap_or(&n);
                        (n.starts_with("nn.") || n.starts_with("torch.nn."))
                            && !matches!(
                                last,
                                "Module" | "Sequential" | "ModuleList" | "ModuleDict"
                            )
                    })
                })
            }) {
                attrs.insert("weight".to_owned());
                attrs.insert("bias".to_owned());
            }
            attrs.retain(|a| !stateless.get(a).copied().unwrap_or(false));
            if !attrs.is_empty()
                && attrs
                    .iter()
                    .all(|a| own_frozen.contains(&format!("self.{a}")))
            {
                self.frozen_classes.insert(name.clone());
            }
            self.frozen.extend(own_frozen);
            self.class_attrs.insert(name, attrs);
        }
    }

    /// The base classes of `c` defined in this file.
    fn file_bases(&self, c: &StmtClassDef) -> Vec<&'a StmtClassDef> {
        c.arguments
            .iter()
            .flat_map(|a| a.args.iter())
            .filter_map(dotted)
            .filter_map(|b| self.class_defs.get(b.as_str()).copied())
            .collect()
    }

    /// Classes handed to a constructor that builds a submodule by calling what it is given
    /// (Swin's `SwinStage(..., downsample=SwinPatchMerging if last else None)`): where every
    /// construction in the file passes the same class of this file, calling the attribute
    /// runs that class's `forward`.
    fn resolve_ctor_args(&mut self, module: &'a ModModule) {
        if self.ctor_args.is_empty() {
            return;
        }
        let classes: HashSet<String> = self.ctor_args.keys().map(|(c, _)| c.clone()).collect();
        let mut calls = ClassCalls(classes, Vec::new());
        for s in &module.body {
            calls.visit_stmt(s);
        }
        let entries: Vec<((String, String), (String, usize))> = self
            .ctor_args
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for ((class, attr), (param, index)) in entries {
            let mut found: HashSet<String> = HashSet::new();
            let mut unknown = false;
            for (callee, c) in &calls.1 {
                if callee != &class {
                    continue;
                }
                let Some(arg) = crate::checker::argument(c, &param, index) else {
                    continue;
                };
                let mut names = Vec::new();
                class_choices(arg, &mut names);
                for n in names {
                    if self
                        .methods
                        .contains_key(&(n.clone(), "forward".to_owned()))
                    {
                        found.insert(n);
                    } else if n != "None" {
                        unknown = true;
                    }
                }
            }
            // (`__init__`'s own pass took the parameter's name for a class: replaced.)
            let key = (class, attr);
            let known = self.sub_classes.get(&key).is_some_and(|c| {
                self.methods
                    .contains_key(&(c.clone(), "forward".to_owned()))
            });
            if found.len() == 1 && !unknown && !known {
                let sub = found.into_iter().next().unwrap_or_default();
                self.sub_classes.insert(key, sub);
            }
        }
    }

    fn report(&self) -> Vec<FlowCut> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let live_anywhere: Vec<(&String, &Paths)> =
            self.backwards.iter().flat_map(|d| d.live.iter()).collect();
        for d in &self.backwards {
            for (source, cuts) in &d.cut {
                let inference = (source == INFERENCE || source == INFERENCE_PARAMS)
                    && !self.optimized.is_empty();
                let part = source.split_once('.').filter(|(root, _)| *root != "self");
                if !inference
                    && (!self.is_optimized(source)
                        || part.is_some_and(|(_, attr)| is_untrained_copy(attr)))
                {
                    continue;
                }
                for (c, ctx) in cuts {
                    // A use that trains the source on a path the cut's can share.
                    let trained = live_anywhere
                        .iter()
                        .any(|(l, lctx)| overlaps(l, source) && lctx.compatible(ctx));
                    if (inference || !trained) && seen.insert(*c) {
                        out.push(FlowCut {
                            cut: *c,
                            source: source.clone(),
                            in_forward: false,
                        });
                    }
                }
            }
        }
        for (class, d) in &self.forward_returns {
            for (source, cuts) in &d.cut {
                if !source.starts_with("self.")
                    || is_untrained_copy(source)
                    || self.frozen.contains(source)
                {
                    continue;
                }
                // Trained by a `backward()` of the file's own: a reversible layer runs its
                // blocks under `no_grad` in `forward` and recomputes them under `enable_grad`
                // in a backward pass of its own (transformers' Reformer).
                // (This submodule or a part of it: a whole model trained says nothing here.)
                if live_anywhere.iter().any(|(l, _)| {
                    l.strip_prefix(source.as_str())
                        .is_some_and(|r| r.is_empty() || r.starts_with('.'))
                }) {
                    continue;
                }
                // Used by a module that holds this one, on a path of its own: RF-DETR's
                // encoder scores its proposals with `enc_out_class_embed` only to pick them by
                // `topk`, and the detection head runs `self.model.enc_out_class_embed` on the
                // picked queries for its loss.
                let attr = source["self.".len()..].split('.').next().unwrap_or("");
                if self.reached.contains(&(class.clone(), attr.to_owned())) {
                    continue;
                }
                let callable = self.called_only.contains(&(class.clone(), attr.to_owned()));
                for (c, ctx) in cuts {
                    let trained = d
                        .live
                        .iter()
                        .any(|(l, lctx)| overlaps(l, source) && lctx.compatible(ctx));
                    if callable && c.kind == CutKind::NonDiff {
                        continue;
                    }
                    if !trained && seen.insert(*c) {
                        out.push(FlowCut {
                            cut: *c,
                            source: source.clone(),
                            in_forward: true,
                        });
                    }
                }
            }
        }
        out.sort_by_key(|f| f.cut.start);
        out
    }

    /// What `f`'s return value depends on, in terms of its parameters and the file's modules.
    fn summary(&mut self, f: &'a StmtFunctionDef, class: Option<&str>) -> Option<Deps> {
        let k = key(f);
        if let Some(s) = self.summaries.get(&k) {
            return Some(s.clone());
        }
        if !self.in_progress.insert(k) {
            return None;
        }
        let mut frame = Frame {
            env: HashMap::new(),
            class: class.map(str::to_owned),
            no_grad: None,
            inference: false,
            returns: Deps::default(),
            loss_return: false,
            path: Ctx::default(),
            loops: 0,
            free: Vec::new(),
            top: false,
        };
        for p in param_names(&f.parameters) {
            frame
                .env
                .insert(p.clone(), Deps::source(&p, &Ctx::default()));
        }
        if class.is_some() {
            frame.env.remove("self");
        }
        // A LightningModule's `training_step` returns the loss its trainer calls backward on
        // (under manual optimization it returns nothing, and `manual_backward` is seen).
        let is_training_step = f.name.id.as_str() == "training_step"
            && class.is_some_and(|c| self.class_attrs.contains_key(c));
        let returns_loss = is_training_step || self.loss_methods.contains(&k);
        frame.loss_return = returns_loss;
        let first_backward = self.backwards.len();
        self.block(&f.body, &mut frame);
        let own: Vec<Deps> = self.backwards[first_backward..].to_vec();
        if !own.is_empty() {
            self.fn_backwards.insert(k, own);
        }
        let mut ret = frame.returns;
        // Under `@torch.no_grad()` nothing the function returns has a history: the decorator
        // is the one cut of everything it reads (the cuts inside come after it).
        if let Some(d) = f
            .decorator_list
            .iter()
            .find(|d| disables_grad(&d.expression))
        {
            ret = ret.cut_only(CutKind::NoGrad, d.range());
        }
        let is_forward = f.name.id.as_str() == "forward"
            && class.is_some_and(|c| self.class_attrs.contains_key(c));
        // A selector's output holds integers only (`crate::selector`): not a gradient path.
        if is_forward && !crate::selector::returns_only_integers(f) {
            self.forward_returns
                .push((class.unwrap_or_default().to_owned(), ret.clone()));
        }
        if returns_loss {
            self.backwards.push(ret.clone());
        }
        self.in_progress.remove(&k);
        self.summaries.insert(k, ret.clone());
        Some(ret)
    }

    fn block(&mut self, body: &'a [Stmt], fr: &mut Frame) {
        for s in body {
            self.stmt(s, fr);
        }
    }

    /// Alternative bodies, each run from the same state (statements inside one run in order,
    /// so `x = f(x); x = x.detach()` leaves only the cut); afterwards each name holds what any
    /// of them left, and, when `may_skip`, what it held before.
    fn branches(&mut self, bodies: &[&'a [Stmt]], may_skip: bool, fr: &mut Frame) {
        let start = fr.env.clone();
        let mut out = if may_skip {
            start.clone()
        } else {
            HashMap::new()
        };
        for b in bodies {
            fr.env = start.clone();
            self.block(b, fr);
            merge_env(&mut out, std::mem::take(&mut fr.env));
        }
        fr.env = out;
    }

    /// An `if`/`elif`/`else`: each arm runs from the state before it, on the path where its
    /// test was true and every earlier test false (a test is its own condition: `elif` is an
    /// `if` inside the `else`). Afterwards each name holds what any arm that did not return
    /// left in it, on the path that joins those arms (see [`crate::path`]).
    fn if_stmt(&mut self, i: &'a ruff_python_ast::StmtIf, fr: &mut Frame) {
        let mut tests: Vec<Option<&'a Expr>> = vec![Some(&i.test)];
        let mut bodies: Vec<&'a [Stmt]> = vec![&i.body];
        for c in &i.elif_else_clauses {
            tests.push(c.test.as_ref());
            bodies.push(&c.body);
        }
        let has_else = i.elif_else_clauses.last().is_some_and(|c| c.test.is_none());
        let start = fr.env.clone();
        let start_path = fr.path.clone();
        let mut before = start_path.clone(); // every earlier test false
        let mut keys = Vec::new(); // the tests so far that constrain
        let mut arms_out: Vec<HashMap<String, Deps>> = Vec::new(); // each arm that falls through
        let mut all_assigned = HashSet::new();
        let mut paths = Vec::new();
        for (test, body) in tests.iter().zip(bodies.iter()) {
            fr.env = start.clone();
            fr.path = before.clone();
            let mut arm = before.clone();
            if let Some(t) = test {
                self.expr(t, fr);
                let key = site_of(t);
                if fr.loops == 0 && !is_deliberate(t) {
                    arm = before.with(key, TRUE);
                    before = before.with(key, FALSE);
                    keys.push(key);
                }
            }
            let returns = terminates(body);
            let free = fr.free.len();
            if returns {
                // Every test that chose this arm (see `Deps::returned`).
                fr.free.extend(keys.iter().copied());
            }
            fr.env = start.clone();
            fr.path = arm;
            self.block(body, fr);
            fr.free.truncate(free);
            let assigned = assigned_names(body);
            if !returns {
                // A name the arm assigns holds, after the `if`, what came through this arm:
                // on this arm's path. (A name it leaves alone, and every name on the path
                // where no arm ran, stays free: `if cond: h = h.detach()` keeps `h`'s live
                // use compatible with its cut.)
                constrain_names(&mut fr.env, &assigned, &fr.path);
                paths.push(std::mem::take(&mut fr.path));
                arms_out.push(std::mem::take(&mut fr.env));
            }
            all_assigned.extend(assigned);
        }
        if !has_else {
            // No arm ran: every test was false. When an arm computes something (a residual
            // branch: `if use_res: r = self.drop(r); r += x`), a name it assigns holds what it
            // held before only on that path. An arm that only toggles a stop-gradient
            // (`if sg: h = h.detach()`) leaves the value it skipped free: the toggle is the
            // choice, not a rival computation.
            let mut skipped = start.clone();
            if bodies.iter().any(|b| does_work(b)) {
                constrain_names(&mut skipped, &all_assigned, &before);
            }
            paths.push(before);
            arms_out.push(skipped);
        }
        // Every arm returned: what follows is unreachable from here, evaluate it as before.
        let mut envs = arms_out.into_iter();
        fr.env = envs.next().unwrap_or(start);
        for env in envs {
            merge_env(&mut fr.env, env);
        }
        fr.path = Ctx::after(&paths).unwrap_or(start_path);
    }

    /// A loop body: run twice (a value carried to the next iteration reaches its uses), and
    /// merged with the state before it (the loop may not run at all).
    fn looped(&mut self, target: Option<(&'a Expr, &Deps)>, body: &'a [Stmt], fr: &mut Frame) {
        let start = fr.env.clone();
        for _ in 0..2 {
            if let Some((t, d)) = target {
                self.bind_target(t, d.clone(), fr);
            }
            self.block(body, fr);
            merge_env(&mut fr.env, start.clone());
        }
    }

    fn under_no_grad(&self, d: Deps, fr: &Frame) -> Deps {
        match fr.no_grad {
            Some(r) => {
                let mut d = d.cut_all(CutKind::NoGrad, r, &fr.path);
                if fr.inference {
                    // Even a value made from data alone is an inference tensor: backward
                    // fails wherever an op saves it.
                    d.add_cuts(
                        INFERENCE.to_owned(),
                        BTreeMap::from([(Cut::new(CutKind::NoGrad, r), fr.path.clone())]),
                    );
                }
                d
            }
            None => d,
        }
    }

    fn assign(&mut self, target: &'a Expr, value: &'a Expr, fr: &mut Frame) {
        if let (Expr::Tuple(t), Expr::Tuple(v)) = (target, value) {
            if t.elts.len() == v.elts.len() {
                for (te, ve) in t.elts.iter().zip(v.elts.iter()) {
                    self.assign(te, ve, fr);
                }
                return;
            }
        }
        let named_model = matches!(target, Expr::Name(n) if fr.class.is_none() && self.module_vars.contains(n.id.as_str()));
        if self.ck.constructs_module(value) || named_model {
            self.expr(value, fr);
            if let Expr::Name(n) = target {
                let mut d = Deps::source(n.id.as_str(), &fr.path);
                if let (Some(r), true) = (fr.no_grad, fr.inference) {
                    d.add_cuts(
                        INFERENCE_PARAMS.to_owned(),
                        BTreeMap::from([(Cut::new(CutKind::NoGrad, r), fr.path.clone())]),
                    );
                }
                fr.bind(n.id.as_str(), d);
            }
            return;
        }
        let d = self.expr(value, fr);
        let d = self.under_no_grad(d, fr);
        // `values, idx = x.topk(k)`: the second name holds indices, without history.
        if let (Expr::Tuple(t), true) = (target, values_indices(value)) {
            if let [v, i] = t.elts.as_slice() {
                self.bind_target(v, d.clone(), fr);
                let cut = d.cut_all(CutKind::NonDiff, value.range(), &fr.path);
                self.bind_target(i, cut, fr);
                return;
            }
        }
        self.bind_target(target, d, fr);
    }

    fn bind_target(&mut self, target: &'a Expr, d: Deps, fr: &mut Frame) {
        match target {
            Expr::Name(n) => fr.bind(n.id.as_str(), d),
            Expr::Tuple(t) => {
                for e in &t.elts {
                    self.bind_target(e, d.clone(), fr);
                }
            }
            Expr::List(l) => {
                for e in &l.elts {
                    self.bind_target(e, d.clone(), fr);
                }
            }
            Expr::Starred(s) => self.bind_target(&s.value, d, fr),
            Expr::Subscript(s) => {
                self.expr(&s.slice, fr);
                if let Expr::Name(n) = s.value.as_ref() {
                    let id = n.id.as_str();
                    if let Some(old) = fr.env.get_mut(id) {
                        old.union(d);
                    } else if !fr.top {
                        // A global written in place inside a function (`bank[idx] = emb`): it
                        // holds what was written for the rest of the function.
                        let mut old = self.expr(&s.value, fr);
                        old.union(d);
                        fr.bind(id, old);
                    }
                }
            }
            _ => {}
        }
    }

    fn stmt(&mut self, s: &'a Stmt, fr: &mut Frame) {
        match s {
            Stmt::Assign(a) => {
                for t in &a.targets {
                    self.assign(t, &a.value, fr);
                }
            }
            Stmt::AnnAssign(a) => {
                if let Some(v) = &a.value {
                    self.assign(&a.target, v, fr);
                }
            }
            Stmt::AugAssign(a) => {
                let d = self.expr(&a.value, fr);
                let d = self.under_no_grad(d, fr);
                if let Expr::Name(n) = a.target.as_ref() {
                    let mut cur = fr.env.get(n.id.as_str()).cloned().unwrap_or_default();
                    cur.union(d);
                    fr.env.insert(n.id.to_string(), cur);
                }
            }
            Stmt::Expr(e) => {
                // `outs.append(head(x))`, `outs.extend(...)`, `parts.insert(0, y)`,
                // `feats.update(...)`: the container holds what was put in it (a per-level
                // head's outputs collected in a loop, then concatenated).
                if let Some((name, args)) = container_put(&e.value) {
                    if fr.env.contains_key(name) {
                        let d = self.all(args, fr);
                        let d = self.under_no_grad(d, fr);
                        if let Some(old) = fr.env.get_mut(name) {
                            old.union(d);
                        }
                        return;
                    }
                }
                let d = self.expr(&e.value, fr);
                // `h.detach_()`: `h` itself is cut from here on.
                if let Expr::Call(c) = e.value.as_ref() {
                    if let Expr::Attribute(a) = c.func.as_ref() {
                        if let (Expr::Name(n), "detach_", true) = (
                            a.value.as_ref(),
                            a.attr.id.as_str(),
                            c.arguments.args.is_empty(),
                        ) {
                            fr.bind(n.id.as_str(), d);
                        }
                    }
                }
            }
            Stmt::Return(r) => {
                if let Some(v) = &r.value {
                    let d = if fr.loss_return {
                        let mut parts = (Vec::new(), Vec::new());
                        loss_parts(v, &mut parts);
                        for e in parts.1 {
                            self.expr(e, fr);
                        }
                        let mut d = Deps::default();
                        for e in parts.0 {
                            d.union(self.expr(e, fr));
                        }
                        d
                    } else {
                        self.expr(v, fr)
                    };
                    let d = self.under_no_grad(d, fr);
                    // Returned on this path only.
                    fr.returns.union(d.returned(&fr.path, &fr.free));
                }
            }
            Stmt::If(i) => self.if_stmt(i, fr),
            Stmt::For(f) => {
                let d = self.expr(&f.iter, fr);
                fr.loops += 1;
                self.looped(Some((&f.target, &d)), &f.body, fr);
                fr.loops -= 1;
                self.block(&f.orelse, fr);
            }
            Stmt::While(w) => {
                self.expr(&w.test, fr);
                fr.loops += 1;
                self.looped(None, &w.body, fr);
                fr.loops -= 1;
                self.block(&w.orelse, fr);
            }
            Stmt::With(w) => {
                let saved = (fr.no_grad, fr.inference);
                for item in &w.items {
                    if disables_grad(&item.context_expr) {
                        fr.no_grad = Some(item.context_expr.range());
                        fr.inference = dotted_callee(&item.context_expr)
                            .is_some_and(|n| n.ends_with("inference_mode"));
                    } else {
                        let d = self.expr(&item.context_expr, fr);
                        if let Some(v) = &item.optional_vars {
                            self.bind_target(v, d, fr);
                        }
                    }
                }
                self.block(&w.body, fr);
                (fr.no_grad, fr.inference) = saved;
            }
            Stmt::Try(t) => {
                self.block(&t.body, fr);
                let mut bodies: Vec<&'a [Stmt]> = t
                    .handlers
                    .iter()
                    .map(|h| {
                        let ruff_python_ast::ExceptHandler::ExceptHandler(h) = h;
                        h.body.as_slice()
                    })
                    .collect();
                bodies.push(&t.orelse);
                self.branches(&bodies, true, fr);
                self.block(&t.finalbody, fr);
            }
            Stmt::Match(m) => {
                self.expr(&m.subject, fr);
                let bodies: Vec<&'a [Stmt]> = m.cases.iter().map(|c| c.body.as_slice()).collect();
                self.branches(&bodies, true, fr);
            }
            _ => {}
        }
    }

    fn comprehension(&mut self, gens: &'a [Comprehension], fr: &mut Frame) {
        for g in gens {
            let d = self.expr(&g.iter, fr);
            self.bind_target(&g.target, d, fr);
            for cond in &g.ifs {
                self.expr(cond, fr);
            }
        }
    }

    fn all(&mut self, exprs: impl IntoIterator<Item = &'a Expr>, fr: &mut Frame) -> Deps {
        let mut d = Deps::default();
        for e in exprs {
            d.union(self.expr(e, fr));
        }
        d
    }

    fn expr(&mut self, e: &'a Expr, fr: &mut Frame) -> Deps {
        match e {
            Expr::Name(n) => {
                let id = n.id.as_str();
                if let Some(d) = fr.env.get(id) {
                    d.clone()
                } else if self.module_vars.contains(id) {
                    Deps::source(id, &fr.path)
                } else {
                    Deps::default()
                }
            }
            Expr::Attribute(a) => {
                if SHAPE_ATTRS.contains(&a.attr.id.as_str()) {
                    return Deps::default();
                }
                // `x.max(-1).indices`: no history.
                if a.attr.id.as_str() == "indices" && values_indices(&a.value) {
                    return self
                        .expr(&a.value, fr)
                        .cut_all(CutKind::NonDiff, e.range(), &fr.path);
                }
                if a.attr.id.as_str() == "data" {
                    return self
                        .expr(&a.value, fr)
                        .cut_all(CutKind::Data, e.range(), &fr.path);
                }
                if let (Expr::Name(n), Some(class)) = (a.value.as_ref(), &fr.class) {
                    if n.id.as_str() == "self" {
                        let attr = a.attr.id.as_str();
                        if self
                            .class_attrs
                            .get(class)
                            .is_some_and(|s| s.contains(attr))
                        {
                            return Deps::source(&format!("self.{attr}"), &fr.path);
                        }
                        // A method passed as a value (`apply_chunking_to_forward(self.ff_chunk,
                        // ...)`): what its result depends on, apart from its arguments.
                        let class = class.clone();
                        if let Some(m) =
                            self.methods.get(&(class.clone(), attr.to_owned())).copied()
                        {
                            if let Some(mut sum) = self.summary(m, Some(&class)) {
                                let params: HashSet<String> = param_names(&m.parameters)
                                    .into_iter()
                                    .filter(|p| p != "self")
                                    .collect();
                                sum.live.retain(|s, _| of_param(s, &params).is_none());
                                sum.cut.retain(|s, _| of_param(s, &params).is_none());
                                return sum.at_call(site_of(e), fr.loops > 0).constrain(&fr.path);
                            }
                        }
                        return Deps::default();
                    }
                }
                // A submodule of a model named in the file or passed in (`model.bert(...)`,
                // `model.classifier(...)`): a source of its own, so that one cut off while a
                // sibling trains is seen (a whole model is live when any part of it is).
                // An instance's attribute that its class only ever sets to a plain value
                // (`self.rewards = []`, filled with an environment's rewards): no module.
                if let Some((_, class)) = self.instance_of(&a.value, fr) {
                    if self.plain_attr(&class, a.attr.id.as_str()) {
                        return Deps::default();
                    }
                }
                if let Expr::Name(n) = a.value.as_ref() {
                    let id = n.id.as_str();
                    let whole = match fr.env.get(id) {
                        Some(d) => d.is_whole(id),
                        None => self.module_vars.contains(id),
                    };
                    if whole && id != "self" {
                        return Deps::source(&format!("{id}.{}", a.attr.id), &fr.path);
                    }
                }
                self.expr(&a.value, fr)
            }
            Expr::Call(_) => self.call(e, fr),
            Expr::Compare(c) => {
                let d = self.expr(&c.left, fr);
                let mut d = d;
                d.union(self.all(c.comparators.iter(), fr));
                d.cut_all(CutKind::NonDiff, e.range(), &fr.path)
            }
            Expr::BinOp(b) => {
                let mut d = self.expr(&b.left, fr);
                d.union(self.expr(&b.right, fr));
                d
            }
            Expr::UnaryOp(u) => self.expr(&u.operand, fr),
            Expr::BoolOp(b) => self.all(b.values.iter(), fr),
            Expr::If(i) => {
                self.expr(&i.test, fr);
                let mut d = self.expr(&i.body, fr);
                d.union(self.expr(&i.orelse, fr));
                d
            }
            Expr::Subscript(s) => {
                self.expr(&s.slice, fr);
                let d = self.expr(&s.value, fr);
                // `x.topk(k)[1]`: the indices.
                let second = matches!(s.slice.as_ref(), Expr::NumberLiteral(n) if matches!(&n.value, ruff_python_ast::Number::Int(i) if i.as_u64() == Some(1)));
                if second && values_indices(&s.value) {
                    return d.cut_all(CutKind::NonDiff, e.range(), &fr.path);
                }
                d
            }
            Expr::Starred(s) => self.expr(&s.value, fr),
            Expr::Tuple(t) => self.all(t.elts.iter(), fr),
            Expr::List(l) => self.all(l.elts.iter(), fr),
            Expr::Set(s) => self.all(s.elts.iter(), fr),
            Expr::Dict(d) => self.all(d.items.iter().map(|i| &i.value), fr),
            Expr::ListComp(l) => {
                self.comprehension(&l.generators, fr);
                self.expr(&l.elt, fr)
            }
            Expr::SetComp(l) => {
                self.comprehension(&l.generators, fr);
                self.expr(&l.elt, fr)
            }
            Expr::Generator(l) => {
                self.comprehension(&l.generators, fr);
                self.expr(&l.elt, fr)
            }
            Expr::DictComp(l) => {
                self.comprehension(&l.generators, fr);
                self.expr(&l.value, fr)
            }
            Expr::Named(n) => {
                let d = self.expr(&n.value, fr);
                self.bind_target(&n.target, d.clone(), fr);
                d
            }
            Expr::Await(a) => self.expr(&a.value, fr),
            _ => Deps::default(),
        }
    }

    fn args(&mut self, c: &'a ruff_python_ast::ExprCall, fr: &mut Frame) -> Deps {
        let mut d = self.all(c.arguments.args.iter(), fr);
        d.union(self.all(c.arguments.keywords.iter().map(|k| &k.value), fr));
        d
    }

    fn call(&mut self, e: &'a Expr, fr: &mut Frame) -> Deps {
        let Expr::Call(c) = e else {
            return Deps::default();
        };
        let name = dotted(&c.func);
        if let Expr::Attribute(a) = c.func.as_ref() {
            let attr = a.attr.id.as_str();
            let receiver = dotted(&a.value);
            let self_attr = receiver.as_deref() == Some("self");
            let no_args = c.arguments.args.is_empty();
            let namespace = self_attr
                || receiver.as_deref().is_some_and(|r| {
                    matches!(r, "torch" | "F" | "np" | "numpy" | "math")
                        || r.starts_with("torch.")
                        || r.starts_with("nn.")
                });
            // A framework's backward of a loss passed to it: Lightning's
            // `self.manual_backward(loss)`, `accelerator.backward(loss)`, `fabric.backward(loss)`,
            // DeepSpeed's `engine.backward(loss)` (for `loss.backward(gradient)` the argument
            // adds only what the gradient depends on).
            if self_attr && matches!(attr, "manual_backward" | "backward") {
                let d = self.args(c, fr);
                self.backwards.push(d.constrain(&fr.path));
                return Deps::default();
            }
            match if self_attr { "" } else { attr } {
                "backward" if !namespace => {
                    let mut d = self.expr(&a.value, fr);
                    d.union(self.args(c, fr));
                    self.backwards.push(d.constrain(&fr.path));
                    return Deps::default();
                }
                // A copy made outside the block is an ordinary tensor.
                "clone" if !namespace && fr.no_grad.is_none() => {
                    let mut d = self.expr(&a.value, fr);
                    self.args(c, fr);
                    d.cut.remove(INFERENCE);
                    return d;
                }
                "detach" | "detach_" if !namespace && no_args => {
                    return self
                        .expr(&a.value, fr)
                        .cut_all(CutKind::Detach, e.range(), &fr.path);
                }
                // `x.new_tensor(h)`: a copy of `h` without its history (`x` gives the dtype
                // and device only).
                "new_tensor" if !namespace => {
                    self.expr(&a.value, fr);
                    let d = self.args(c, fr);
                    return d.cut_all(CutKind::Rewrap, e.range(), &fr.path);
                }
                _ if ITEM_METHODS.contains(&attr) && !namespace && no_args => {
                    // `t.detach().cpu().numpy()`: the round trip is the cut, the `.detach()`
                    // on the way only its first step.
                    let base = host_chain_base(&a.value);
                    return self
                        .expr(base, fr)
                        .cut_all(CutKind::Item, e.range(), &fr.path);
                }
                _ if NON_DIFF_METHODS.contains(&attr) => {
                    let d = if namespace {
                        self.args(c, fr)
                    } else {
                        let d = self.expr(&a.value, fr);
                        self.args(c, fr);
                        d
                    };
                    return d.cut_all(CutKind::NonDiff, e.range(), &fr.path);
                }
                _ if LIKE_METHODS.contains(&attr) && !namespace => {
                    let d = self.expr(&a.value, fr);
                    self.args(c, fr);
                    return d;
                }
                _ if SHAPE_METHODS.contains(&attr) && !namespace => {
                    self.expr(&a.value, fr);
                    return Deps::default();
                }
                _ => {}
            }
            // A method of a module class of the file called on an instance of it: the
            // method's summary on that instance's parts.
            if let Some((owner, class)) = self.instance_of(&a.value, fr) {
                if let Some(m) = self.methods.get(&(class.clone(), attr.to_owned())).copied() {
                    return self.apply(m, Some(&class), c, fr).rebased(&owner);
                }
            }
            // A method of a plain class of the file (a trainer of the script's own) called on
            // an instance (`Trainer(model, opt).fit()`, `trainer.fit()`): run with this call.
            if let Some(class) = self.plain_instance(&a.value) {
                if let Some(m) = self.method_of(&class, attr) {
                    self.expr(&a.value, fr);
                    return self.apply(m, Some(&class), c, fr);
                }
            }
            if let (Expr::Name(n), Some(class)) = (a.value.as_ref(), fr.class.clone()) {
                if n.id.as_str() == "self" {
                    if let Some(m) = self.methods.get(&(class.clone(), attr.to_owned())).copied() {
                        return self.apply(m, Some(&class), c, fr);
                    }
                    if let Some(d) = self.dispatched(&class, attr, c, fr) {
                        return d;
                    }
                    // A submodule built from a class of this file: its `forward` with what the
                    // caller passes (a head that detaches its input cuts the trunk before it).
                    let sub = self
                        .sub_classes
                        .get(&(class.clone(), attr.to_owned()))
                        .cloned();
                    if let Some(fwd) = sub.as_ref().and_then(|s| {
                        self.methods
                            .get(&(s.clone(), "forward".to_owned()))
                            .copied()
                    }) {
                        let mut d =
                            self.apply_submodule(fwd, sub.as_deref().unwrap_or_default(), c, fr);
                        d.add_live(format!("self.{attr}"), Paths::one(fr.path.clone()));
                        return d;
                    }
                }
            }
        }
        let Some(name) = name else {
            let mut d = self.expr(&c.func, fr);
            d.union(self.args(c, fr));
            return d;
        };
        match name.as_str() {
            "torch.tensor" | "torch.as_tensor" | "torch.Tensor" | "torch.FloatTensor"
            | "torch.LongTensor" | "nn.Parameter" | "torch.nn.Parameter" => {
                let d = self.all(c.arguments.args.iter(), fr);
                self.all(c.arguments.keywords.iter().map(|k| &k.value), fr);
                return d.cut_all(CutKind::Rewrap, e.range(), &fr.path);
            }
            "float" | "int" | "bool" => {
                return self.args(c, fr).cut_all(CutKind::Item, e.range(), &fr.path);
            }
            "np.array" | "np.asarray" | "numpy.array" | "numpy.asarray" => {
                return self.args(c, fr).cut_all(CutKind::Item, e.range(), &fr.path);
            }
            "torch.autograd.backward" | "torch.autograd.grad" | "autograd.grad" => {
                let d = c
                    .arguments
                    .args
                    .first()
                    .map(|a| self.expr(a, fr))
                    .unwrap_or_default();
                self.args(c, fr);
                // `autograd.grad(loss, model.parameters())` trains (a hand-written step);
                // `autograd.grad(energy, x)` w.r.t. data does not.
                let inputs = c.arguments.args.get(1).or_else(|| {
                    c.arguments
                        .keywords
                        .iter()
                        .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == "inputs"))
                        .map(|k| &k.value)
                });
                let wrt_params = inputs.is_none_or(|i| {
                    // `model.parameters()`, `list(net.parameters())`, `params`, `self.weights`
                    // given to an optimizer.
                    let mut names = Dotted(Vec::new());
                    names.visit_expr(i);
                    names.0.iter().any(|n| {
                        let last = n.rsplit('.').next().unwrap_or(n);
                        matches!(last, "parameters" | "named_parameters")
                            || last.contains("param")
                            || self.optimized.contains(n)
                    })
                });
                if name == "torch.autograd.backward" || wrt_params {
                    self.backwards.push(d.clone().constrain(&fr.path));
                }
                if name == "torch.autograd.backward" {
                    return Deps::default();
                }
                // The gradients depend on what the outputs depend on: differentiably only with
                // `create_graph=True` (a gradient penalty, a force from an energy).
                let create_graph = c.arguments.keywords.iter().any(|k| {
                    k.arg
                        .as_ref()
                        .is_some_and(|a| a.id.as_str() == "create_graph")
                        && !matches!(&k.value, Expr::BooleanLiteral(b) if !b.value)
                });
                return if create_graph {
                    d
                } else {
                    d.cut_all(CutKind::NoCreateGraph, e.range(), &fr.path)
                };
            }
            n if OPAQUE_BUILTINS.contains(&n) => {
                self.args(c, fr);
                return Deps::default();
            }
            n if disables_grad(&c.func) || n.ends_with("no_grad") => return Deps::default(),
            _ => {}
        }
        if !fr.env.contains_key(&name) {
            if let Some(f) = self.functions.get(&name).copied() {
                return self.apply(f, None, c, fr);
            }
        }
        let last = name.rsplit('.').next().unwrap_or(&name);
        let inspection = |k: &ruff_python_ast::Keyword| {
            k.arg.as_ref().is_some_and(|a| {
                let a = a.id.as_str();
                a.ends_with("hidden_states") || a.ends_with("attentions") || a == "past_key_values"
            })
        };
        if last.ends_with("Output") && c.arguments.keywords.iter().any(inspection) {
            // A model output (`SequenceClassifierOutput(loss=..., logits=...,
            // hidden_states=..., attentions=...)`): the per-layer hidden states, attention maps
            // and cache beside its results are there for inspection; they do not train what
            // they come from (`last_hidden_state`, logits, boxes, losses do).
            let mut d = Deps::default();
            for k in &c.arguments.keywords {
                let v = self.expr(&k.value, fr);
                if !inspection(k) {
                    d.union(v);
                }
            }
            d.union(self.all(c.arguments.args.iter(), fr));
            return d;
        }
        if builds_mask(&name) {
            // An attention mask built from other file's helper (`create_causal_mask(...,
            // inputs_embeds=h)`): it reads the tensors it is given for their shape, dtype and
            // device; the model's output does not depend on them through it.
            self.args(c, fr);
            return Deps::default();
        }
        let mut d = self.expr(&c.func, fr);
        d.union(self.args(c, fr));
        d
    }

    /// A call of a function of this file: its summary with parameters replaced by arguments.
    fn apply(
        &mut self,
        f: &'a StmtFunctionDef,
        class: Option<&str>,
        c: &'a ruff_python_ast::ExprCall,
        fr: &mut Frame,
    ) -> Deps {
        let Some(summary) = self.summary(f, class) else {
            return self.args(c, fr);
        };
        // The backwards it runs, on what this call passes. (Their deps hold only parameters
        // and the file's own names: a call costs one substitution per backward.)
        let (params, bound) = self.bind_call(f, class, c, fr);
        let site = site_of(&c.func);
        if let Some(backwards) = self.fn_backwards.get(&key(f)).cloned() {
            for b in backwards {
                let d = self.substitute_bound(b, params.clone(), &bound, site, fr);
                self.backwards.push(d);
            }
        }
        self.substitute_bound(summary, params, &bound, site, fr)
    }

    /// A method of `class` or of a base class of the file.
    fn method_of(&self, class: &str, name: &str) -> Option<&'a StmtFunctionDef> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut todo = vec![class.to_owned()];
        while let Some(cl) = todo.pop() {
            if let Some(m) = self.methods.get(&(cl.clone(), name.to_owned())) {
                return Some(m);
            }
            if let Some(c) = self.class_defs.get(&cl).copied() {
                if seen.insert(cl) {
                    todo.extend(self.file_bases(c).iter().map(|b| b.name.id.to_string()));
                }
            }
        }
        None
    }

    /// A framework method that calls the class's own hooks by name, which the file never
    /// calls itself: PyTorch Geometric's `self.propagate(edge_index, x=x, alpha=alpha)` runs
    /// the layer's `message` on the keywords (then its `aggregate` and `update` on what that
    /// returns), `self.edge_updater(...)` its `edge_update`; a hook's parameter takes the
    /// keyword of its name, `x_j` / `x_i` the keyword `x` gathered at the edges' ends
    /// (`index`, `ptr`, `size_i` are the graph's integers). `None` where the class of the file
    /// defines no such hook (the library's own passes the tensors through).
    fn dispatched(
        &mut self,
        class: &str,
        attr: &str,
        c: &'a ruff_python_ast::ExprCall,
        fr: &mut Frame,
    ) -> Option<Deps> {
        let hooks: &[&str] = match attr {
            "propagate" => &["message", "aggregate", "update"],
            "edge_updater" => &["edge_update"],
            _ => return None,
        };
        // (The layer must define the first hook; the library's own passes the tensors through.)
        self.method_of(class, hooks[0])?;
        // (The positional arguments are the graph: `edge_index`, `size`.)
        self.all(c.arguments.args.iter(), fr);
        let mut kw: HashMap<String, Deps> = HashMap::new();
        for k in &c.arguments.keywords {
            let d = self.expr(&k.value, fr);
            if let Some(arg) = &k.arg {
                kw.insert(arg.id.to_string(), d);
            }
        }
        let site = site_of(&c.func);
        let mut out: Option<Deps> = None;
        for hook in hooks {
            let Some(f) = self.method_of(class, hook) else {
                continue;
            };
            let params = own_params(f, Some(class));
            let mut bound: HashMap<String, Deps> = HashMap::new();
            for (j, p) in params.iter().enumerate() {
                // `aggregate(inputs, index, ...)`, `update(inputs, **kwargs)`: the previous
                // hook's result first.
                if j == 0 {
                    if let Some(prev) = &out {
                        bound.insert(p.clone(), prev.clone());
                        continue;
                    }
                }
                let gathered = p.strip_suffix("_j").or_else(|| p.strip_suffix("_i"));
                let d = kw
                    .get(p.as_str())
                    .or_else(|| gathered.and_then(|g| kw.get(g)));
                if let Some(d) = d {
                    bound.insert(p.clone(), d.clone());
                }
            }
            let Some(summary) = self.summary(f, Some(class)) else {
                continue;
            };
            out = Some(self.substitute_bound(summary, params, &bound, site, fr));
        }
        out
    }

    /// A submodule's `forward` called from its owner: what it does to its arguments. Its own
    /// `self.X` sources are its parts, which the caller counts as the submodule itself.
    fn apply_submodule(
        &mut self,
        f: &'a StmtFunctionDef,
        class: &str,
        c: &'a ruff_python_ast::ExprCall,
        fr: &mut Frame,
    ) -> Deps {
        let Some(mut summary) = self.summary(f, Some(class)) else {
            return self.args(c, fr);
        };
        summary.live.retain(|s, _| !s.starts_with("self."));
        summary.cut.retain(|s, _| !s.starts_with("self."));
        self.substitute(f, Some(class), summary, c, fr)
    }

    /// A summary with its parameters replaced by a call's arguments.
    fn substitute(
        &mut self,
        f: &'a StmtFunctionDef,
        class: Option<&str>,
        summary: Deps,
        c: &'a ruff_python_ast::ExprCall,
        fr: &mut Frame,
    ) -> Deps {
        let (params, bound) = self.bind_call(f, class, c, fr);
        self.substitute_bound(summary, params, &bound, site_of(&c.func), fr)
    }

    /// A call's arguments bound to the function's parameters (without `self`), each evaluated
    /// once.
    fn bind_call(
        &mut self,
        f: &'a StmtFunctionDef,
        class: Option<&str>,
        c: &'a ruff_python_ast::ExprCall,
        fr: &mut Frame,
    ) -> (Vec<String>, HashMap<String, Deps>) {
        let params = own_params(f, class);
        let mut bound: HashMap<String, Deps> = HashMap::new();
        for (i, a) in c.arguments.args.iter().enumerate() {
            let d = self.expr(a, fr);
            if let Some(p) = params.get(i) {
                bound.insert(p.clone(), d);
            }
        }
        for k in &c.arguments.keywords {
            let d = self.expr(&k.value, fr);
            if let Some(arg) = &k.arg {
                bound.insert(arg.id.to_string(), d);
            }
        }
        (params, bound)
    }

    /// A summary with its parameters (`params`, without `self`) replaced by what a call binds
    /// to them; `site` names the call.
    fn substitute_bound(
        &mut self,
        summary: Deps,
        params: Vec<String>,
        bound: &HashMap<String, Deps>,
        site: u64,
        fr: &mut Frame,
    ) -> Deps {
        let params: HashSet<String> = params.into_iter().collect();
        // The callee's `if` tests as seen from this call; what its arguments carry already
        // holds the caller's path, what it reads itself gets it here.
        let summary = summary.at_call(site, fr.loops > 0);
        let mut out = Deps::default();
        // What a source of the summary stands for at this call: a parameter, what the call
        // binds to it; called from the module's own code, a global (`model`), what the module
        // holds now (built under `inference_mode`, say).
        let resolve = |s: &str| -> Option<(Option<&Deps>, Option<String>)> {
            if let Some((p, part)) = of_param(s, &params) {
                return Some((bound.get(p), part.map(str::to_owned)));
            }
            let (root, part) = s.split_once('.').map_or((s, None), |(r, p)| (r, Some(p)));
            let global = fr.env.get(root).filter(|_| fr.top)?;
            Some((Some(global), part.map(str::to_owned)))
        };
        for (s, ctx) in summary.live {
            match resolve(&s) {
                Some((d, part)) => {
                    if let Some(d) = d {
                        for c in ctx.iter() {
                            out.union(d.clone().part(part.as_deref()).constrain(c));
                        }
                    }
                }
                None => {
                    if let Some(ctx) = ctx.and(&fr.path) {
                        out.add_live(s, ctx);
                    }
                }
            }
        }
        for (s, cuts) in summary.cut {
            match resolve(&s) {
                Some((d, part)) => {
                    if let Some(d) = d {
                        out.union(d.clone().part(part.as_deref()).cut_by(&cuts));
                    }
                }
                None => {
                    let cuts = cuts
                        .into_iter()
                        .filter_map(|(cut, ctx)| ctx.and(&fr.path).map(|x| (cut, x)))
                        .collect();
                    out.add_cuts(s, cuts);
                }
            }
        }
        out
    }
}

/// The values `self.{attr}` is assigned in a class (None: rebound otherwise).
struct SelfAssigned<'s, 'a>(&'s str, Vec<Option<&'a Expr>>);

impl<'a> Visitor<'a> for SelfAssigned<'_, 'a> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        let (targets, value) = crate::checker::bound_by(s);
        for t in targets {
            if dotted(t).is_some_and(|d| d.strip_prefix("self.") == Some(self.0)) {
                // (`+=`, a loop target: no literal.)
                self.1.push(value);
            }
        }
        visitor::walk_stmt(self, s);
    }
}

fn is_literal(e: &Expr) -> bool {
    match e {
        Expr::List(l) => l.elts.iter().all(is_literal),
        Expr::Tuple(t) => t.elts.iter().all(is_literal),
        Expr::Set(t) => t.elts.iter().all(is_literal),
        Expr::Dict(d) => d.items.iter().all(|i| is_literal(&i.value)),
        Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::BooleanLiteral(_)
        | Expr::NoneLiteral(_) => true,
        Expr::UnaryOp(u) => is_literal(&u.operand),
        _ => false,
    }
}

/// Names the file binds, every time, to an instance of the same module class of the file
/// (`agent = Agent(envs).to(device)`, a device move or a mode switch after the call).
fn instances_of_file_classes(
    module: &ModModule,
    is_class: &dyn Fn(&str) -> bool,
) -> HashMap<String, String> {
    fn built(is_class: &dyn Fn(&str) -> bool, e: &Expr) -> Option<String> {
        let Expr::Call(c) = e else { return None };
        if let Expr::Attribute(a) = c.func.as_ref() {
            if matches!(
                a.attr.id.as_str(),
                "to" | "cuda" | "cpu" | "float" | "double" | "half" | "bfloat16" | "train" | "eval"
            ) {
                if let Some(b) = built(is_class, &a.value) {
                    return Some(b);
                }
            }
        }
        dotted(&c.func).filter(|n| is_class(n))
    }
    struct Binds<'c>(&'c dyn Fn(&str) -> bool, HashMap<String, Option<String>>);
    impl<'a> Visitor<'a> for Binds<'_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            let (targets, value) = crate::checker::bound_by(s);
            for t in targets {
                let mut names = Vec::new();
                crate::checker::bound_names(t, &mut names);
                let class = match (t, value) {
                    (Expr::Name(_), Some(v)) => built(self.0, v),
                    _ => None,
                };
                for n in names {
                    let e = self.1.entry(n.to_owned()).or_insert_with(|| class.clone());
                    if *e != class {
                        *e = None;
                    }
                }
            }
            visitor::walk_stmt(self, s);
        }
    }
    let mut b = Binds(is_class, HashMap::new());
    for s in &module.body {
        b.visit_stmt(s);
    }
    b.1.into_iter()
        .filter_map(|(n, c)| c.map(|c| (n, c)))
        .collect()
}

/// A function that builds an attention mask (`create_causal_mask`, `_prepare_4d_attention_mask`,
/// `get_extended_attention_mask`, `invert_attention_mask`): a construction verb and a name that
/// ends in `mask`. (`apply_mask(x, m)`, `masked_fill` use a mask on a value: not these.)
fn builds_mask(name: &str) -> bool {
    let last = name
        .rsplit('.')
        .next()
        .unwrap_or(name)
        .trim_start_matches('_');
    const VERBS: &[&str] = &[
        "create", "make", "get", "prepare", "build", "update", "expand", "invert", "compute",
        "generate",
    ];
    last.ends_with("mask") && VERBS.iter().any(|v| last.starts_with(v))
}

/// Calls that only move a value out of autograd, or copy or cast it: a block made of these
/// toggles a stop-gradient and computes nothing.
const TOGGLES: &[&str] = &[
    "detach",
    "detach_",
    "clone",
    "cpu",
    "float",
    "double",
    "half",
    "to",
    "contiguous",
    "item",
    "tolist",
    "numpy",
    "tensor",
    "as_tensor",
    "int",
    "bool",
    "no_grad",
    "set_grad_enabled",
    "inference_mode",
    "enable_grad",
    "requires_grad_",
];

/// Whether a block calls anything beyond [`TOGGLES`] (a module, an op).
fn does_work(body: &[Stmt]) -> bool {
    struct Work(bool);
    impl<'a> Visitor<'a> for Work {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Call(c) = e {
                let last = dotted(&c.func)
                    .map(|n| n.rsplit('.').next().unwrap_or(&n).to_owned())
                    .or_else(|| match c.func.as_ref() {
                        Expr::Attribute(a) => Some(a.attr.id.to_string()),
                        _ => None,
                    });
                if !last.is_some_and(|l| TOGGLES.contains(&l.as_str())) {
                    self.0 = true;
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut w = Work(false);
    for s in body {
        w.visit_stmt(s);
    }
    w.0
}

/// The plain names a block assigns (at any depth, not inside nested functions or classes).
fn assigned_names(body: &[Stmt]) -> HashSet<String> {
    let mut a = Assigned(HashSet::new());
    for st in body {
        a.visit_stmt(st);
    }
    a.0
}

/// Each of `names` in `env` holds its value only on `path` from here.
fn constrain_names(env: &mut HashMap<String, Deps>, names: &HashSet<String>, path: &Ctx) {
    for name in names {
        if let Some(d) = env.remove(name) {
            env.insert(name.clone(), d.constrain(path));
        }
    }
}

struct Assigned(HashSet<String>);

impl<'a> Visitor<'a> for Assigned {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        let targets: Vec<&Expr> = match s {
            Stmt::FunctionDef(_) | Stmt::ClassDef(_) => return,
            Stmt::Assign(a) => a.targets.iter().collect(),
            Stmt::AugAssign(a) => vec![&a.target],
            Stmt::AnnAssign(a) => vec![&a.target],
            Stmt::For(f) => vec![&f.target],
            _ => Vec::new(),
        };
        for t in targets {
            self.names(t);
        }
        visitor::walk_stmt(self, s);
    }
}

impl Assigned {
    fn names(&mut self, t: &Expr) {
        match t {
            Expr::Name(n) => {
                self.0.insert(n.id.to_string());
            }
            Expr::Tuple(t) => t.elts.iter().for_each(|e| self.names(e)),
            Expr::List(l) => l.elts.iter().for_each(|e| self.names(e)),
            Expr::Starred(s) => self.names(&s.value),
            _ => {}
        }
    }
}

/// The identity of an `if` test or a call site in the file (its node's address).
fn site_of(e: &Expr) -> u64 {
    e as *const Expr as usize as u64
}

/// Whether a block never finishes normally: it ends in a `return` or `raise`, or in an `if`
/// whose every arm (with an `else`) does.
fn terminates(body: &[Stmt]) -> bool {
    match body.last() {
        Some(Stmt::Return(_) | Stmt::Raise(_)) => true,
        Some(Stmt::If(i)) => {
            i.elif_else_clauses.last().is_some_and(|c| c.test.is_none())
                && terminates(&i.body)
                && i.elif_else_clauses.iter().all(|c| terminates(&c.body))
        }
        _ => false,
    }
}

/// The dotted name of a call's callee, or of the expression itself.
fn dotted_callee(e: &Expr) -> Option<String> {
    match e {
        Expr::Call(c) => dotted(&c.func),
        other => dotted(other),
    }
}

/// The tensor under the steps that carry a value to the host (`.detach()`, `.cpu()`, `.data`,
/// dtype casts, `.clone()`, `.to(...)`): what a `.numpy()`/`.tolist()`/`.item()` really reads.
fn host_chain_base(e: &Expr) -> &Expr {
    let mut cur = e;
    loop {
        match cur {
            Expr::Call(c) => match c.func.as_ref() {
                Expr::Attribute(a)
                    if matches!(
                        a.attr.id.as_str(),
                        "detach"
                            | "cpu"
                            | "float"
                            | "double"
                            | "half"
                            | "clone"
                            | "contiguous"
                            | "to"
                            | "squeeze"
                            | "flatten"
                            | "reshape"
                            | "view"
                    ) =>
                {
                    cur = &a.value;
                }
                _ => return cur,
            },
            Expr::Attribute(a) if a.attr.id.as_str() == "data" => cur = &a.value,
            _ => return cur,
        }
    }
}

/// A returned loss and what is returned beside it: `(loss, outputs)`, `{"loss": loss, ...}`,
/// `(loss, outputs) if return_outputs else loss` (into `out.0`, the rest into `out.1`).
fn loss_parts<'a>(e: &'a Expr, out: &mut (Vec<&'a Expr>, Vec<&'a Expr>)) {
    match e {
        Expr::Tuple(t) if !t.elts.is_empty() => {
            loss_parts(&t.elts[0], out);
            out.1.extend(t.elts[1..].iter());
        }
        Expr::If(i) => {
            out.1.push(&i.test);
            loss_parts(&i.body, out);
            loss_parts(&i.orelse, out);
        }
        Expr::Dict(d) => {
            let is_loss = |k: &Option<Expr>| matches!(k, Some(Expr::StringLiteral(s)) if s.value.to_str() == "loss");
            if !d.items.iter().any(|i| is_loss(&i.key)) {
                out.0.push(e);
                return;
            }
            for i in &d.items {
                if is_loss(&i.key) {
                    out.0.push(&i.value);
                } else {
                    out.1.push(&i.value);
                }
            }
        }
        _ => out.0.push(e),
    }
}

/// `@staticmethod` on `f`.
/// A function's parameters as a call binds them: a method's without `self` (a `@staticmethod`
/// called through `self` has no `self` to skip).
fn own_params(f: &StmtFunctionDef, class: Option<&str>) -> Vec<String> {
    let mut params = param_names(&f.parameters);
    if class.is_some() && !params.is_empty() && !is_staticmethod(f) {
        params.remove(0);
    }
    params
}

fn is_staticmethod(f: &StmtFunctionDef) -> bool {
    f.decorator_list
        .iter()
        .any(|d| dotted(&d.expression).is_some_and(|n| n == "staticmethod"))
}

/// A function's parameter names in order: positional ones, then keyword-only ones.
pub(crate) fn param_names(p: &Parameters) -> Vec<String> {
    let mut out: Vec<String> = p
        .posonlyargs
        .iter()
        .chain(p.args.iter())
        .map(|a| a.parameter.name.id.to_string())
        .collect();
    out.extend(p.kwonlyargs.iter().map(|a| a.parameter.name.id.to_string()));
    out
}

/// Submodules and parameters a class freezes itself: `self.X.requires_grad_(False)`,
/// `self.X.requires_grad = False`, a loop over `self.X.parameters()` that sets
/// `requires_grad = False`, `self.X = nn.Parameter(t, requires_grad=False)` (a router's
/// correction bias, updated by hand), the same through `self.register_parameter("X", ...)`.
struct Frozen(HashSet<String>);

/// `nn.Parameter(t, requires_grad=False)` / `Parameter(t, False)`.
fn frozen_parameter(e: &Expr) -> bool {
    let Expr::Call(c) = e else { return false };
    if !crate::checker::call_name(e).is_some_and(|n| n.ends_with("Parameter")) {
        return false;
    }
    let off = |v: &Expr| matches!(v, Expr::BooleanLiteral(b) if !b.value);
    c.arguments.keywords.iter().any(|k| {
        k.arg
            .as_ref()
            .is_some_and(|a| a.id.as_str() == "requires_grad")
            && off(&k.value)
    }) || c.arguments.args.get(1).is_some_and(off)
}

impl<'a> Visitor<'a> for Frozen {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if let Stmt::Assign(a) = s {
            let cleared = matches!(a.value.as_ref(), Expr::BooleanLiteral(v) if !v.value);
            for t in &a.targets {
                let x = match t {
                    Expr::Attribute(at) if cleared && at.attr.id.as_str() == "requires_grad" => {
                        dotted(&at.value)
                    }
                    _ if frozen_parameter(&a.value) => dotted(t),
                    _ => None,
                };
                if let Some(x) = x.filter(|x| x.starts_with("self.")) {
                    self.0.insert(x);
                }
            }
        }
        if let Stmt::For(f) = s {
            let over = match f.iter.as_ref() {
                Expr::Call(c) => match c.func.as_ref() {
                    Expr::Attribute(a) if a.attr.id.as_str() == "parameters" => dotted(&a.value),
                    _ => None,
                },
                _ => None,
            };
            let clears = f.body.iter().any(|b| {
                matches!(b, Stmt::Assign(a) if matches!(a.value.as_ref(), Expr::BooleanLiteral(v) if !v.value)
                    && a.targets.iter().any(|t| matches!(t, Expr::Attribute(at) if at.attr.id.as_str() == "requires_grad")))
            });
            if let (Some(x), true) = (over, clears) {
                if x.starts_with("self.") {
                    self.0.insert(x);
                }
            }
        }
        visitor::walk_stmt(self, s);
    }

    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            if let Expr::Attribute(a) = c.func.as_ref() {
                if a.attr.id.as_str() == "register_parameter"
                    && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                    && c.arguments.args.get(1).is_some_and(frozen_parameter)
                {
                    if let Some(Expr::StringLiteral(name)) = c.arguments.args.first() {
                        self.0.insert(format!("self.{}", name.value.to_str()));
                    }
                }
                if a.attr.id.as_str() == "requires_grad_"
                    && matches!(c.arguments.args.first(), Some(Expr::BooleanLiteral(b)) if !b.value)
                {
                    if let Some(x) = dotted(&a.value).filter(|x| x.starts_with("self.")) {
                        self.0.insert(x);
                    }
                }
            }
        }
        visitor::walk_expr(self, e);
    }
}

/// `self.X(...)` calls of a class's methods where `X` is not a method.
struct Called<'m> {
    methods: &'m HashSet<String>,
    out: HashSet<String>,
}

impl<'a> Visitor<'a> for Called<'_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            if let Expr::Attribute(a) = c.func.as_ref() {
                if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                    && !self.methods.contains(a.attr.id.as_str())
                {
                    self.out.insert(a.attr.id.to_string());
                }
            }
        }
        visitor::walk_expr(self, e);
    }
}

/// Layers without parameters: no gradient of theirs can be lost, so they are no source.
fn is_stateless_layer(value: &Expr) -> bool {
    let name = match value {
        Expr::Call(c) => dotted(&c.func),
        Expr::Subscript(s) => return dotted(&s.value).is_some_and(|n| n.starts_with("ACT2")),
        _ => return false,
    };
    let Some(name) = name else { return false };
    let last = name.rsplit('.').next().unwrap_or(&name);
    crate::rules::parameter_free(last)
        // Not `BertPooler` (a dense layer) nor a fused dropout-add-norm.
        || matches!(last, "DropPath" | "StochasticDepth")
        || name == "get_activation"
        || name.ends_with("act_layer")
}

/// `self.X = p` in `__init__` for a parameter `p` that holds a module: annotated as one
/// (`backbone: nn.Module`, a module class of this file), or built in `__init__` when not given
/// (`if head is None: head = RetinaNetHead(...)`). Such an attribute, when called, is a
/// submodule (a detector's backbone, heads and transform handed to its constructor).
fn handed_in_modules(ck: &Checker, f: &StmtFunctionDef) -> HashSet<String> {
    let p = &f.parameters;
    let mut modules: HashSet<String> = p
        .posonlyargs
        .iter()
        .chain(p.args.iter())
        .chain(p.kwonlyargs.iter())
        .filter(|a| {
            a.parameter.annotation.as_deref().is_some_and(|t| {
                dotted(t).is_some_and(|n| {
                    let last = n.rsplit('.').next().unwrap_or(&n);
                    last == "Module" || ck.is_module_class(last)
                })
            })
        })
        .map(|a| a.parameter.name.id.to_string())
        .collect();
    let params: HashSet<String> = param_names(p).into_iter().collect();
    struct Built<'x, 'y>(
        &'x Checker<'y>,
        &'x HashSet<String>,
        &'x mut HashSet<String>,
    );
    impl<'a> Visitor<'a> for Built<'_, '_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if let Stmt::Assign(a) = s {
                if self.0.constructs_module(&a.value) {
                    for t in &a.targets {
                        if let Expr::Name(n) = t {
                            if self.1.contains(n.id.as_str()) {
                                self.2.insert(n.id.to_string());
                            }
                        }
                    }
                }
            }
            if !matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
                visitor::walk_stmt(self, s);
            }
        }
    }
    let mut b = Built(ck, &params, &mut modules);
    for st in &f.body {
        b.visit_stmt(st);
    }
    let mut out = HashSet::new();
    for st in &f.body {
        if let Stmt::Assign(a) = st {
            if let Expr::Name(v) = a.value.as_ref() {
                if modules.contains(v.id.as_str()) {
                    for t in &a.targets {
                        if let Some(attr) =
                            dotted(t).and_then(|d| d.strip_prefix("self.").map(str::to_owned))
                        {
                            if !attr.contains('.') {
                                out.insert(attr);
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Attributes assigned a stateless layer (`true`) or anything else built by a call (`false`):
/// stateless only when every assignment is (`self.downsample = nn.Identity()` in one branch, a
/// conv in the other). Attributes never assigned a call (a method, a function looked up in a
/// table, an argument kept) are absent.
fn collect_stateless(body: &[Stmt], out: &mut HashMap<String, bool>) {
    struct Collect<'x>(&'x mut HashMap<String, bool>);
    fn built(v: &Expr) -> bool {
        match v {
            Expr::Call(_) => true,
            Expr::If(i) => built(&i.body) || built(&i.orelse),
            _ => false,
        }
    }
    impl<'a> Visitor<'a> for Collect<'_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if let Stmt::Assign(a) = s {
                let stateless = is_stateless_layer(&a.value);
                if stateless || built(&a.value) {
                    for t in &a.targets {
                        if let Expr::Attribute(at) = t {
                            if matches!(at.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                            {
                                let e = self.0.entry(at.attr.id.to_string()).or_insert(true);
                                *e &= stateless;
                            }
                        }
                    }
                }
            }
            if !matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
                visitor::walk_stmt(self, s);
            }
        }
    }
    let mut c = Collect(out);
    for s in body {
        c.visit_stmt(s);
    }
}

/// `self.X = <module or parameter>` anywhere in a method body.
pub(crate) fn collect_self_modules(ck: &Checker, body: &[Stmt], out: &mut HashSet<String>) {
    struct Collect<'x, 'y> {
        ck: &'x Checker<'y>,
        out: &'x mut HashSet<String>,
    }
    impl<'a> Visitor<'a> for Collect<'_, '_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if let Stmt::Assign(a) = s {
                let is_param =
                    crate::checker::call_name(&a.value).is_some_and(|n| n.ends_with("Parameter"));
                if is_param || self.ck.constructs_module(&a.value) {
                    for t in &a.targets {
                        if let Expr::Attribute(at) = t {
                            if matches!(at.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                            {
                                self.out.insert(at.attr.id.to_string());
                            }
                        }
                    }
                }
            }
            if !matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
                visitor::walk_stmt(self, s);
            }
        }
    }
    let mut c = Collect { ck, out };
    for s in body {
        c.visit_stmt(s);
    }
}

/// `name.append(v)` / `.extend(v)` / `.insert(i, v)` / `.add(v)` / `.update(v)` /
/// `.appendleft(v)` / `.setdefault(k, v)` on a plain name: the container and the values put
/// into it (an index or key is not).
fn container_put(e: &Expr) -> Option<(&str, Vec<&Expr>)> {
    let Expr::Call(c) = e else { return None };
    let Expr::Attribute(a) = c.func.as_ref() else {
        return None;
    };
    let Expr::Name(n) = a.value.as_ref() else {
        return None;
    };
    let args = &c.arguments.args;
    let put: Vec<&Expr> = match (a.attr.id.as_str(), args.len()) {
        ("append" | "extend" | "add" | "update" | "appendleft", 1) => vec![&args[0]],
        ("insert" | "setdefault", 2) => vec![&args[1]],
        _ => return None,
    };
    Some((n.id.as_str(), put))
}
