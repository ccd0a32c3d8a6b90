//! GS324: a tensor carried from one iteration of a training loop into the next one's loss
//! with its graph (`history = loss` read by the next step's loss; an RNN's hidden state fed
//! back without `.detach()`): the second `backward()` raises "Trying to backward through the
//! graph a second time".
//!
//! Per loop whose body calls `.backward()`, one iteration is sliced backwards from each
//! backward's receiver through the body's assignments (in order, branches flattened, nested
//! loops and functions left to their own scope). A name the slice reads before the body
//! assigns it comes from the previous iteration; it is reported when the body's last
//! assignment of it carries a graph: its value is not cut (`.detach()`, `.item()`,
//! `float()`, `.tolist()`, `.numpy()`, a helper named for detaching) and depends on a call
//! (a model or loss) or on the loss itself. A counter (`n = n + 1`) depends on neither, nor
//! does an environment's observation (`env.step(action.item())`: a method of an object the
//! file never runs as a model), nor a value assigned under `no_grad`. Tensor metadata
//! (`x.device`, `x.size(0)`) reads nothing; `t.to(device=x.device)` reads `t` only; a
//! comprehension's own loop variables are not the names outside it.
//!
//! A value made before the loop is looked for in the block the loop is in, and through calls:
//! a statement calling a function of the file (or a method of a plain class of the file on an
//! instance, `Trainer(...).fit()`) runs that function's loops on the block's globals and on
//! what the call passes by name. The object a backward is called on with the loss passed
//! (`accelerator.backward(loss)`) is read only where the loop assigns it.

use std::collections::{HashMap, HashSet};

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, ExprContext, Stmt, StmtClassDef, StmtFunctionDef};
use ruff_text_size::{Ranged, TextRange};

use super::Rule;
use crate::checker::Checker;
use crate::flow::{param_names, LIKE_METHODS, SHAPE_ATTRS, SHAPE_METHODS};

pub const RULE: Rule = Rule { code: "GS324" };

/// Calls whose result carries no graph, or is not a tensor.
const PLAIN_CALLS: &[&str] = &[
    "int",
    "float",
    "bool",
    "str",
    "len",
    "range",
    "enumerate",
    "zip",
    "print",
    "round",
    "abs",
    "min",
    "max",
    "isinstance",
    "getattr",
    "hasattr",
    "next",
    "iter",
    "list",
    "tuple",
    "dict",
    "set",
    "sorted",
    "time",
    "perf_counter",
    // torch.func's ensemble state: new leaf tensors (stacked copies), no graph behind them.
    "stack_module_state",
];
/// Namespaces whose functions compute on data, not through a model's parameters.
const DATA_MODULES: &[&str] = &[
    "torch", "F", "nn", "np", "numpy", "math", "random", "time", "os", "rpc", "dist",
];
/// Methods whose result has no graph attached.
const CUT_METHODS: &[&str] = &["detach", "item", "tolist", "numpy", "detach_"];

/// One statement of the flattened body: what it reads (outside cuts), what it writes, whether
/// its value is cut, whether it calls something that can carry a graph.
struct Step {
    range: TextRange,
    reads: Vec<String>,
    writes: Vec<String>,
    cut: bool,
    calls: bool,
    /// See [`Reads::receivers`].
    receivers: Vec<Callee>,
    /// The value is an object built by a class (`GradScaler()`, `Net()`): no tensor.
    construct: bool,
    /// The value is a call: (the root name of its receiver, if a method; the function's own name;
    /// whether it takes no argument).
    value_call: Option<(Option<String>, String, bool)>,
    backward: Vec<String>,
    /// See [`Reads::backward_object`].
    backward_object: Vec<String>,
}

#[derive(Default)]
struct Reads {
    names: Vec<String>,
    calls: bool,
    /// What each call that can carry a graph calls.
    receivers: Vec<Callee>,
    backward: Vec<String>,
    /// The plain name a backward is called on with the loss passed to it: a framework's object
    /// (`accelerator.backward(loss)`), or the loss given a gradient (`loss.backward(g)`). The
    /// slice reads it only where the loop assigns it (the loss).
    backward_object: Vec<String>,
}

/// What a call calls, as far as its graph goes.
enum Callee {
    /// A method of a plain name (`env` in `env.step(a)`).
    Method(String),
    /// A function called by its plain name (`model(x)`, `get_longest_seq_length(data)`).
    Function(String),
    /// Anything else (`self.encoder(x)`).
    Other,
}

fn is_cut_call(e: &Expr) -> bool {
    let Expr::Call(c) = e else { return false };
    match c.func.as_ref() {
        Expr::Attribute(a) => CUT_METHODS.contains(&a.attr.id.as_str()),
        Expr::Name(n) => {
            let f = n.id.as_str();
            matches!(f, "float" | "int" | "bool") || f.contains("detach") || f.contains("repackage")
        }
        _ => false,
    }
}

impl<'a> Visitor<'a> for Reads {
    fn visit_expr(&mut self, e: &'a Expr) {
        if is_cut_call(e) {
            return;
        }
        match e {
            Expr::Name(n) if n.ctx == ExprContext::Load => self.names.push(n.id.to_string()),
            // Metadata (`x.device`, `x.dtype`, `x.shape`) carries no graph.
            Expr::Attribute(a) if SHAPE_ATTRS.contains(&a.attr.id.as_str()) => return,
            Expr::Call(c) if metadata_or_like(c) => {
                // `x.size(0)` reads nothing; `latents_mean.to(device=x.device, dtype=x.dtype)`
                // reads its receiver only: the arguments give a dtype, a device or a shape.
                if let Expr::Attribute(a) = c.func.as_ref() {
                    if LIKE_METHODS.contains(&a.attr.id.as_str()) {
                        self.visit_expr(&a.value);
                    }
                }
                return;
            }
            Expr::ListComp(g) => return self.comprehension(&g.generators, &[&g.elt]),
            Expr::SetComp(g) => return self.comprehension(&g.generators, &[&g.elt]),
            Expr::Generator(g) => return self.comprehension(&g.generators, &[&g.elt]),
            Expr::DictComp(g) => {
                let parts: Vec<&Expr> = g.key.as_deref().into_iter().chain([&*g.value]).collect();
                return self.comprehension(&g.generators, &parts);
            }
            Expr::Call(c) => {
                // A call that can carry parameters' graph: a model, a loss function, a method
                // of one (`model(x, h)`, `self.encoder(x)`, `loss_fn(...)`), not a torch or
                // NumPy function of data (`torch.randperm`, `np.clip`) nor a builtin.
                let plain = match c.func.as_ref() {
                    Expr::Name(n) => PLAIN_CALLS.contains(&n.id.as_str()),
                    Expr::Attribute(a) => {
                        PLAIN_CALLS.contains(&a.attr.id.as_str())
                            || crate::checker::dotted(&a.value).is_some_and(|d| {
                                DATA_MODULES.contains(&d.split('.').next().unwrap_or(""))
                            })
                    }
                    _ => false,
                };
                if let Expr::Attribute(a) = c.func.as_ref() {
                    if matches!(a.attr.id.as_str(), "backward" | "manual_backward") {
                        // `loss.backward()`, or a framework's backward of the loss passed to
                        // it (`accelerator.backward(loss)`, `fabric.backward(loss)`,
                        // `self.manual_backward(loss)`, DeepSpeed's `engine.backward(loss)`).
                        let mut r = Reads::default();
                        match (a.value.as_ref(), c.arguments.args.first()) {
                            (Expr::Name(n), Some(_)) => self.backward_object.push(n.id.to_string()),
                            _ => r.visit_expr(&a.value),
                        }
                        if let Some(first) = c.arguments.args.first() {
                            r.visit_expr(first);
                        }
                        self.backward.extend(r.names);
                    }
                }
                self.calls |= !plain;
                if !plain {
                    self.receivers.push(match c.func.as_ref() {
                        Expr::Attribute(a) => match a.value.as_ref() {
                            Expr::Name(n) => Callee::Method(n.id.to_string()),
                            _ => Callee::Other,
                        },
                        Expr::Name(n) => Callee::Function(n.id.to_string()),
                        _ => Callee::Other,
                    });
                }
                // A name only called (`model(x)`) is a module or a function, not a value
                // that carries a graph: read its arguments only.
                if matches!(c.func.as_ref(), Expr::Name(_)) {
                    for a in c.arguments.args.iter() {
                        self.visit_expr(a);
                    }
                    for k in c.arguments.keywords.iter() {
                        self.visit_expr(&k.value);
                    }
                    return;
                }
            }
            Expr::Lambda(_) => return,
            _ => {}
        }
        visitor::walk_expr(self, e);
    }
}

/// A method of a tensor whose result is metadata (`x.size(0)`) or whose arguments give only a
/// dtype, device or shape (`x.to(other)`): not a call that adds a graph.
fn metadata_or_like(c: &ruff_python_ast::ExprCall) -> bool {
    let Expr::Attribute(a) = c.func.as_ref() else {
        return false;
    };
    let attr = a.attr.id.as_str();
    let namespace = crate::checker::dotted(&a.value)
        .is_some_and(|d| DATA_MODULES.contains(&d.split('.').next().unwrap_or("")));
    !namespace && (SHAPE_METHODS.contains(&attr) || LIKE_METHODS.contains(&attr))
}

impl Reads {
    /// A comprehension reads what its parts read, less the names its own `for`s bind
    /// (`torch.stack([interpolate(mask) for mask in masks])` reads `masks`, not the `mask`
    /// the loop assigns). `tuple(s.detach() for s in state)`: every element is cut, so is
    /// the whole.
    fn comprehension(&mut self, generators: &[ruff_python_ast::Comprehension], parts: &[&Expr]) {
        if parts.iter().all(|p| is_cut_call(p)) {
            return;
        }
        let mut inner = Reads::default();
        let mut bound = Vec::new();
        for (i, g) in generators.iter().enumerate() {
            // The first source is evaluated outside the comprehension's scope.
            if i == 0 {
                self.visit_expr(&g.iter);
            } else {
                inner.visit_expr(&g.iter);
            }
            g.ifs.iter().for_each(|x| inner.visit_expr(x));
            crate::checker::bound_names(&g.target, &mut bound);
        }
        parts.iter().for_each(|p| inner.visit_expr(p));
        self.names.extend(
            inner
                .names
                .into_iter()
                .filter(|n| !bound.contains(&n.as_str())),
        );
        self.calls |= inner.calls;
        self.receivers.extend(inner.receivers);
        self.backward.extend(inner.backward);
        self.backward_object.extend(inner.backward_object);
    }
}

fn targets(e: &Expr, out: &mut Vec<String>) {
    let mut names = Vec::new();
    crate::checker::bound_names(e, &mut names);
    out.extend(names.into_iter().map(str::to_owned));
}

fn step(range: TextRange, value: Option<&Expr>, writes: Vec<String>, aug: bool) -> Step {
    let mut r = Reads::default();
    if let Some(v) = value {
        r.visit_expr(v);
    }
    if aug {
        r.names.extend(writes.iter().cloned());
    }
    let construct = value.is_some_and(|v| {
        matches!(v, Expr::Call(c) if crate::checker::dotted(&c.func).is_some_and(|n| {
            n.rsplit('.').next().is_some_and(|l| l.starts_with(|ch: char| ch.is_ascii_uppercase()))
        }))
    });
    let value_call = match value {
        Some(Expr::Call(c)) => {
            let no_args = c.arguments.args.is_empty() && c.arguments.keywords.is_empty();
            match c.func.as_ref() {
                // The receiver by its root name, through subscripts and calls
                // (`accelerator.torch_device_mesh["sp"].get_group()` -> `accelerator`).
                Expr::Attribute(a) => Some((root_name(&a.value), a.attr.id.to_string(), no_args)),
                Expr::Name(n) => Some((None, n.id.to_string(), no_args)),
                _ => None,
            }
        }
        _ => None,
    };
    Step {
        range,
        construct,
        value_call,
        cut: value.is_some_and(is_cut_call),
        reads: r.names,
        writes,
        calls: r.calls,
        receivers: r.receivers,
        backward: r.backward,
        backward_object: r.backward_object,
    }
}

/// The name an attribute, subscript or call chain starts from (`a` in `a.b["k"].c()`).
fn root_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Name(n) => Some(n.id.to_string()),
        Expr::Attribute(a) => root_name(&a.value),
        Expr::Subscript(s) => root_name(&s.value),
        Expr::Call(c) => root_name(&c.func),
        _ => None,
    }
}

/// The body in execution order, compound statements flattened (not nested loops or scopes).
fn flatten(body: &[Stmt], out: &mut Vec<Step>) {
    for s in body {
        match s {
            Stmt::Assign(a) => {
                let mut w = Vec::new();
                a.targets.iter().for_each(|t| targets(t, &mut w));
                out.push(step(s.range(), Some(&a.value), w, false));
            }
            Stmt::AnnAssign(a) => {
                let mut w = Vec::new();
                targets(&a.target, &mut w);
                out.push(step(s.range(), a.value.as_deref(), w, false));
            }
            Stmt::AugAssign(a) => {
                let mut w = Vec::new();
                targets(&a.target, &mut w);
                out.push(step(s.range(), Some(&a.value), w, true));
            }
            Stmt::Expr(e) => {
                // `h.detach_()` cuts `h` in place.
                let mut w = Vec::new();
                if let Expr::Call(c) = e.value.as_ref() {
                    if let Expr::Attribute(a) = c.func.as_ref() {
                        if a.attr.id.as_str() == "detach_" {
                            targets(&a.value, &mut w);
                        }
                    }
                }
                let cut = !w.is_empty();
                let mut st = step(s.range(), Some(&e.value), w, false);
                st.cut |= cut;
                out.push(st);
            }
            Stmt::If(i) => {
                out.push(step(i.test.range(), Some(&i.test), Vec::new(), false));
                flatten(&i.body, out);
                for c in &i.elif_else_clauses {
                    flatten(&c.body, out);
                }
            }
            // Values made under `no_grad` carry no graph: they are assigned there (a frozen
            // backbone's features, DINO's linear evaluation), with nothing to carry.
            Stmt::With(w)
                if w.items
                    .iter()
                    .any(|i| crate::checker::disables_grad(&i.context_expr)) =>
            {
                let from = out.len();
                flatten(&w.body, out);
                for st in &mut out[from..] {
                    st.cut = true;
                }
            }
            Stmt::With(w) => flatten(&w.body, out),
            Stmt::Try(t) => {
                flatten(&t.body, out);
                flatten(&t.orelse, out);
                flatten(&t.finalbody, out);
            }
            _ => {}
        }
    }
}

/// The step before `before` that last assigns `name`.
fn last_def(steps: &[Step], name: &str, before: usize) -> Option<usize> {
    (0..before)
        .rev()
        .find(|&j| steps[j].writes.iter().any(|w| w == name))
}

/// One iteration's backward slice: the names it reads before the body assigns them (with the
/// step that reads them), and the steps it passes through.
fn slice(
    steps: &[Step],
    backwards: &[usize],
    loop_targets: &[String],
) -> (HashMap<String, usize>, HashSet<usize>) {
    let defs = |name: &str, before: usize| last_def(steps, name, before);
    let mut carried: HashMap<String, usize> = HashMap::new();
    let mut in_slice: HashSet<usize> = HashSet::new();
    for &b in backwards {
        let mut todo: Vec<(String, usize)> =
            steps[b].backward.iter().map(|n| (n.clone(), b)).collect();
        todo.extend(
            steps[b]
                .backward_object
                .iter()
                .filter(|n| defs(n, b).is_some())
                .map(|n| (n.clone(), b)),
        );
        let mut seen: HashSet<(String, usize)> = HashSet::new();
        while let Some((name, at)) = todo.pop() {
            if !seen.insert((name.clone(), at)) {
                continue;
            }
            match defs(&name, at) {
                Some(d) => {
                    in_slice.insert(d);
                    if !steps[d].cut {
                        todo.extend(steps[d].reads.iter().map(|n| (n.clone(), d)));
                    }
                }
                None if !loop_targets.contains(&name) => {
                    carried.entry(name).or_insert(at);
                }
                None => {}
            }
        }
    }
    (carried, in_slice)
}

/// A method of an object the file never runs as a model (`env.step(action.item())`, a
/// gym environment in a reinforcement-learning loop) adds no graph of its own: what it
/// returns carries one only through its arguments, which the slice follows anyway.
///
/// Nor does a function of the file whose every `return` computes without a call that can
/// carry one (litgpt's `get_longest_seq_length(data)`: `max(len(d) for d in data)`, a
/// number).
fn settle_calls(ck: &Checker, steps: &mut [Step]) {
    for st in steps {
        if st.calls {
            st.calls = st.receivers.iter().any(|r| match r {
                Callee::Method(n) => ck.runs_as_model(n),
                Callee::Function(f) => !returns_plain_values(ck, f),
                Callee::Other => true,
            });
        }
    }
}

/// `f` is a function of the file that returns a value, and nothing in its body calls what can
/// carry a graph (nested functions aside): no model, no loss function, no other function of
/// the file.
fn returns_plain_values(ck: &Checker, f: &str) -> bool {
    struct Body<'r> {
        reads: &'r mut Reads,
        returns: bool,
    }
    impl<'a> Visitor<'a> for Body<'_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            match s {
                Stmt::FunctionDef(_) | Stmt::ClassDef(_) => {}
                Stmt::Return(r) => {
                    self.returns |= r.value.is_some();
                    visitor::walk_stmt(self, s);
                }
                _ => visitor::walk_stmt(self, s),
            }
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            self.reads.visit_expr(e);
        }
    }
    let Some(def) = ck.defs.get(f) else {
        return false;
    };
    let mut reads = Reads::default();
    let mut body = Body {
        reads: &mut reads,
        returns: false,
    };
    def.body.iter().for_each(|s| body.visit_stmt(s));
    body.returns
        && reads.receivers.iter().all(|r| match r {
            Callee::Method(n) => !ck.runs_as_model(n),
            Callee::Function(_) | Callee::Other => false,
        })
}

fn loop_steps(ck: &Checker, body: &[Stmt]) -> Option<(Vec<Step>, Vec<usize>)> {
    let mut steps = Vec::new();
    flatten(body, &mut steps);
    settle_calls(ck, &mut steps);
    let backwards: Vec<usize> = (0..steps.len())
        .filter(|&i| !steps[i].backward.is_empty() || !steps[i].backward_object.is_empty())
        .collect();
    (!backwards.is_empty()).then_some((steps, backwards))
}

pub fn check(ck: &mut Checker, loop_targets: &[String], body: &[Stmt]) {
    let Some((steps, backwards)) = loop_steps(ck, body) else {
        return;
    };
    let defs = |name: &str, before: usize| last_def(&steps, name, before);
    let (carried, in_slice) = slice(&steps, &backwards, loop_targets);
    let mut found: Vec<(String, usize, usize)> = Vec::new();
    for (name, read) in carried {
        // The value the next iteration sees: the body's last assignment of the name.
        let Some(last) = defs(&name, steps.len()) else {
            continue;
        };
        if steps[last].cut {
            continue;
        }
        // A graph: the value comes from this iteration's loss computation, through a step
        // that feeds the loss and calls a model or loss function (an augmentation of the
        // input or a counter carried over holds no graph).
        let carries =
            |d: usize| steps[d].calls && (in_slice.contains(&d) || backwards.contains(&d));
        let mut graph = carries(last);
        let mut todo: Vec<(String, usize)> = steps[last]
            .reads
            .iter()
            .map(|n| (n.clone(), last))
            .collect();
        let mut seen = HashSet::new();
        while let Some((n, at)) = todo.pop() {
            if graph || !seen.insert((n.clone(), at)) {
                continue;
            }
            if let Some(d) = defs(&n, at) {
                if steps[d].cut {
                    continue;
                }
                graph |= carries(d);
                todo.extend(steps[d].reads.iter().map(|x| (x.clone(), d)));
            }
        }
        if graph {
            found.push((name, last, read));
        }
    }
    found.sort_by_key(|(_, last, _)| steps[*last].range.start());
    for (name, last, read) in found {
        let cause = steps[last].range;
        report(ck, &name, cause, (&steps, &backwards, read), Kind::Carried);
    }
}

/// Which shape of the bug: a value carried from the last iteration, or made before the loop.
enum Kind {
    Carried,
    BeforeLoop,
}

/// One finding: at the assignment that holds the graph (`cause`), with the loop's read and
/// its failing backward related.
fn report(
    ck: &mut Checker,
    name: &str,
    cause: TextRange,
    (steps, backwards, read): (&[Step], &[usize], usize),
    kind: Kind,
) {
    let loc = ck.location(&cause);
    let read_loc = ck.location(&steps[read].range);
    let backward = backwards
        .iter()
        .find(|&&b| b >= read)
        .map(|&b| ck.location(&steps[b].range));
    let (what, reads, fails, fix) = match kind {
        Kind::Carried => (
            format!("`{name}` keeps this iteration's graph and the next iteration's loss uses it: the next `backward()`"),
            format!("the next iteration reads `{name}` here"),
            "the backward that fails",
            format!("Carry `{name}.detach()` (or `{name}.item()` for a number) into the next iteration; recompute it inside the step if its gradient is needed."),
        ),
        Kind::BeforeLoop => (
            format!("`{name}` is computed once before the loop, with its graph, and every iteration's loss uses it: the second `backward()`"),
            format!("each iteration reads `{name}` here"),
            "the backward that fails from the second iteration on",
            format!("Compute `{name}` inside the loop, or under `torch.no_grad()` (or `.detach()` it) if it is a fixed target."),
        ),
    };
    ck.report(
        RULE.finding(format!(
            "{what} goes through a graph the first one freed (\"Trying to backward through the graph a second time\")."
        ))
        .at(Some(loc))
        .related(Some(read_loc), reads)
        .related(backward, fails)
        .fix(fix),
    );
}

/// Loops of a block whose loss reads a value computed *before* the loop with a model's graph
/// (`prototypes = encoder(support)` then `loss(encoder(q), prototypes)` in every step): the
/// second iteration's backward goes through the graph the first one freed.
///
/// A statement that calls a function of the file (`train(encoder, opt, prototypes)`, `train()`,
/// `Trainer(...).fit()`) runs that function's loops: a name such a loop reads that the function
/// neither assigns before it nor binds at all is the global the block holds, a parameter is
/// what the call passes (a plain name), each as the block last assigned it before the call.
pub fn check_block(ck: &mut Checker, block: &[Stmt]) {
    // The block flattened once; `seen` steps precede the statement at hand.
    let mut before: Vec<Step> = Vec::new();
    for stmt in block {
        let seen = before.len();
        flatten(std::slice::from_ref(stmt), &mut before);
        settle_calls(ck, &mut before[seen..]);
        if let Some((targets, body)) = a_loop(stmt) {
            let outside = |ck: &Checker, name: &str| made_with_graph(ck, &before, name, seen);
            loop_after(ck, &targets, body, &outside);
            continue;
        }
        for (f, call) in called_functions(ck, block, stmt) {
            let params = param_names(&f.parameters);
            let method = matches!(call.func.as_ref(), Expr::Attribute(_));
            let params: Vec<String> = params.into_iter().skip(usize::from(method)).collect();
            let bound = bound_names(f);
            let mut inner: Vec<Step> = Vec::new();
            for s in &f.body {
                let at = inner.len();
                flatten(std::slice::from_ref(s), &mut inner);
                settle_calls(ck, &mut inner[at..]);
                let Some((targets, body)) = a_loop(s) else {
                    continue;
                };
                let outside = |ck: &Checker, name: &str| {
                    // (Assigned in the function before the loop: its own check reads it.)
                    if last_def(&inner, name, at).is_some() {
                        return None;
                    }
                    let outer = match params.iter().position(|p| p == name) {
                        Some(i) => passed(call, name, i)?,
                        None if !bound.contains(name) => name.to_owned(),
                        None => return None,
                    };
                    made_with_graph(ck, &before, &outer, seen)
                };
                loop_after(ck, &targets, body, &outside);
            }
        }
    }
}

/// A `for` or `while` statement: its targets and body.
fn a_loop(stmt: &Stmt) -> Option<(Vec<String>, &[Stmt])> {
    match stmt {
        Stmt::For(f) => Some((loop_targets(&f.target), &f.body)),
        Stmt::While(w) => Some((Vec::new(), &w.body)),
        _ => None,
    }
}

/// Where `steps` (before `seen`) last assign `name` a value that carries a model's graph.
fn made_with_graph(ck: &Checker, steps: &[Step], name: &str, seen: usize) -> Option<TextRange> {
    let d = last_def(steps, name, seen)?;
    let st = &steps[d];
    (st.calls && !st.cut && !st.construct && !returns_object(ck, st)).then_some(st.range)
}

/// One loop: the names its loss reads before its body assigns them, each made with a graph
/// where `outside` says (before the loop).
fn loop_after(
    ck: &mut Checker,
    targets: &[String],
    body: &[Stmt],
    outside: &dyn Fn(&Checker, &str) -> Option<TextRange>,
) {
    let Some((steps, backwards)) = loop_steps(ck, body) else {
        return;
    };
    let (entering, _) = slice(&steps, &backwards, targets);
    let mut found: Vec<(String, TextRange, usize)> = entering
        .into_iter()
        .filter(|(name, _)| last_def(&steps, name, steps.len()).is_none())
        .filter(|(name, _)| !is_module_like(ck, name))
        .filter_map(|(name, read)| outside(ck, &name).map(|r| (name, r, read)))
        .collect();
    // A frozen model's output has no graph; lint cannot tell which model was frozen.
    // (Read only here: a file has many blocks, few loops that qualify.)
    if found.is_empty()
        || ck.source.contains("requires_grad_(False)")
        || ck.source.contains("requires_grad = False")
    {
        return;
    }
    found.sort_by_key(|(_, r, _)| r.start());
    for (name, cause, read) in found {
        report(
            ck,
            &name,
            cause,
            (&steps, &backwards, read),
            Kind::BeforeLoop,
        );
    }
}

/// The plain name a call passes for parameter `name` (at `index` among the positional ones).
fn passed(call: &ruff_python_ast::ExprCall, name: &str, index: usize) -> Option<String> {
    match crate::checker::argument(call, name, index)? {
        Expr::Name(n) => Some(n.id.to_string()),
        _ => None,
    }
}

/// Every name a function binds: its parameters and every name it assigns.
fn bound_names(f: &StmtFunctionDef) -> HashSet<String> {
    let mut out: HashSet<String> = param_names(&f.parameters).into_iter().collect();
    struct Stores<'o>(&'o mut HashSet<String>);
    impl<'a> Visitor<'a> for Stores<'_> {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Name(n) = e {
                if n.ctx != ExprContext::Load {
                    self.0.insert(n.id.to_string());
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut v = Stores(&mut out);
    for s in &f.body {
        v.visit_stmt(s);
    }
    out
}

/// The functions of the file a statement calls, with the call: plain functions by name, and a
/// method called on an instance of a class of the block (`Trainer(...).fit()`, `t.fit()` after
/// `t = Trainer(...)`). Not into a definition.
fn called_functions<'a>(
    ck: &Checker<'a>,
    block: &'a [Stmt],
    stmt: &'a Stmt,
) -> Vec<(&'a StmtFunctionDef, &'a ruff_python_ast::ExprCall)> {
    if matches!(stmt, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
        return Vec::new();
    }
    let class_of = |e: &Expr| -> Option<&'a StmtClassDef> {
        let name = match e {
            Expr::Call(c) => crate::checker::dotted(&c.func)?,
            Expr::Name(n) => {
                // Bound in the block to one construction.
                let mut built = block.iter().filter_map(|s| match s {
                    Stmt::Assign(a)
                        if a.targets.len() == 1
                            && matches!(&a.targets[0], Expr::Name(t) if t.id == n.id) =>
                    {
                        match a.value.as_ref() {
                            Expr::Call(c) => crate::checker::dotted(&c.func),
                            _ => Some(String::new()),
                        }
                    }
                    _ => None,
                });
                let first = built.next()?;
                built.all(|b| b == first).then_some(first)?
            }
            _ => return None,
        };
        block.iter().find_map(|s| match s {
            Stmt::ClassDef(c) if c.name.id.as_str() == name => Some(c),
            _ => None,
        })
    };
    struct Calls<'a>(Vec<&'a ruff_python_ast::ExprCall>);
    impl<'a> Visitor<'a> for Calls<'a> {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Call(c) = e {
                self.0.push(c);
            }
            if !matches!(e, Expr::Lambda(_)) {
                visitor::walk_expr(self, e);
            }
        }
    }
    let mut calls = Calls(Vec::new());
    calls.visit_stmt(stmt);
    calls
        .0
        .into_iter()
        .filter_map(|c| match c.func.as_ref() {
            // (Not a method of the same name: `ck.defs` holds every definition.)
            Expr::Name(n) => ck
                .defs
                .get(n.id.as_str())
                .filter(|f| {
                    !param_names(&f.parameters)
                        .first()
                        .is_some_and(|p| p == "self" || p == "cls")
                })
                .map(|f| (*f, c)),
            Expr::Attribute(a) => {
                let class = class_of(&a.value)?;
                class.body.iter().find_map(|s| match s {
                    Stmt::FunctionDef(f) if f.name.id == a.attr.id => Some((f, c)),
                    _ => None,
                })
            }
            _ => None,
        })
        .collect()
}

/// A value made by a call that returns a model or a handle, not a tensor: a model fetched or
/// unwrapped (`accelerator.unwrap_model(model)`, `AutoModel.from_pretrained(...)`), or a
/// getter called without arguments on something the file never runs as a model
/// (`groups._get_sequence_parallel_group()`; `model.get_weight()` may well hold a graph).
fn returns_object(ck: &Checker, step: &Step) -> bool {
    let Some((receiver, last, no_args)) = &step.value_call else {
        return false;
    };
    let last = last.to_ascii_lowercase();
    if last.contains("model") || last == "from_pretrained" {
        return true;
    }
    *no_args
        && receiver.as_deref().is_some_and(|root| {
            !ck.source.contains(&format!("{root}(")) && !is_module_like(ck, root)
        })
}

/// A name the file treats as a module or an optimizer (`model.parameters()`, `model.train()`,
/// `opt.zero_grad()`): passed to the loss helper, it is not a value with a graph.
fn is_module_like(ck: &Checker, name: &str) -> bool {
    crate::checker::MODULE_METHODS
        .iter()
        .any(|m| ck.source.contains(&format!("{name}.{m}(")))
}

/// The names a `for` target binds.
pub fn loop_targets(target: &Expr) -> Vec<String> {
    let mut out = Vec::new();
    targets(target, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn a_loss_kept_for_the_next_step() {
        let src = "history = None\nfor x in data:\n    loss = model(x).sum()\n    if history is not None:\n        loss = loss + 0.1 * history\n    history = loss\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS324".into(), 6)]);
    }

    #[test]
    fn a_loss_kept_for_the_next_step_with_a_frameworks_backward() {
        // Accelerate: the loss goes to `accelerator.backward(loss)`, inside `accumulate`.
        let src = "history = None\nfor x in data:\n    with accelerator.accumulate(model):\n        loss = model(x).sum()\n        if history is not None:\n            loss = loss + 0.1 * history\n        history = loss\n        accelerator.backward(loss)\n        opt.step()\n";
        assert_eq!(codes(src), vec![("GS324".into(), 7)]);
        // Lightning's manual optimization.
        // A comprehension reads the carried value, as a generator's source.
        let comp = "history = []\nfor x in data:\n    loss = model(x).sum() + sum(h for h in history)\n    history = [loss]\n    loss.backward()\n";
        assert_eq!(codes(comp), vec![("GS324".into(), 4)]);
        let manual = "history = None\nfor x in data:\n    loss = model(x).sum()\n    if history is not None:\n        loss = loss + history\n    history = loss\n    self.manual_backward(loss)\n";
        assert_eq!(codes(manual), vec![("GS324".into(), 6)]);
        // The accelerator itself is no value carried between steps.
        let fine = "for x in data:\n    loss = model(x).sum()\n    accelerator.backward(loss)\n    opt.step()\n";
        assert!(codes(fine).is_empty());
    }

    #[test]
    fn an_rnn_state_fed_back_without_detach() {
        let src = "hidden = None\nfor x, y in data:\n    out, hidden = model(x, hidden)\n    loss = crit(out, y)\n    loss.backward()\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS324".into(), 3)]);
        // Through a method of a model the file runs: still its graph.
        let src = "hidden = None\nopt = torch.optim.SGD(rnn.parameters(), lr=0.1)\nfor x, y in data:\n    out, hidden = rnn.step(x, hidden)\n    loss = crit(out, y)\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS324".into(), 4)]);
    }

    #[test]
    fn a_running_sum_that_is_backpropagated() {
        let src = "running = 0\nfor x in data:\n    running += loss_fn(model(x))\n    running.backward()\n";
        assert_eq!(codes(src), vec![("GS324".into(), 3)]);
    }

    #[test]
    fn prototypes_computed_once_before_the_loop() {
        let src = "prototypes = encoder(support).mean(1)\nfor step in range(3):\n    logits = -torch.cdist(encoder(query), prototypes)\n    loss = F.cross_entropy(logits, labels)\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS324".into(), 1)]);
        let ok = [
            "with torch.no_grad():\n    prototypes = encoder(support).mean(1)\nfor step in range(3):\n    loss = F.cross_entropy(-torch.cdist(encoder(query), prototypes), labels)\n    loss.backward()\n",
            "prototypes = encoder(support).mean(1).detach()\nfor step in range(3):\n    loss = F.cross_entropy(-torch.cdist(encoder(query), prototypes), labels)\n    loss.backward()\n",
            "teacher.requires_grad_(False)\ntargets = teacher(x)\nfor step in range(3):\n    loss = mse(student(x), targets)\n    loss.backward()\n",
            "scale = torch.tensor(2.0)\nfor step in range(3):\n    loss = model(x).sum() * scale\n    loss.backward()\n",
            "model = models.resnet18(num_classes=10)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor b in data:\n    loss = compute_loss(model, b)\n    loss.backward()\n",
            "params, buffers = stack_module_state(members)\nfor x in data:\n    loss = vmap(one, in_dims=(0, 0, None))(params, buffers, x).sum()\n    loss.backward()\n",
            // Accelerate's sequence-parallel test: an unwrapped model whose loss function the
            // step calls, a process group fetched once (objects, not tensors).
            "unwrapped = accelerator.unwrap_model(model)\nsp_group = groups._get_sequence_parallel_group()\nfor batch in dl:\n    out = model(**batch)\n    loss = unwrapped.loss_function(logits=out.logits)\n    losses = all_gather(loss, group=sp_group)\n    accelerator.backward(sum(losses))\n",
            // A number computed once by a function of the file (litgpt's adapter finetuning).
            "def longest(data):\n    return max(len(d['ids']) for d in data)\n\nn = longest(train)\nfor it in range(10):\n    loss = model(get_batch(train, n)).sum()\n    loss.backward()\n",
            // A process group fetched through a device mesh (Accelerate's ALST example).
            "sp_group = accelerator.torch_device_mesh['sp'].get_group()\nfor batch in dl:\n    loss = model(**batch).loss\n    losses = all_gather(loss, group=sp_group)\n    accelerator.backward(sum(losses))\n",
        ];
        for src in ok {
            assert!(codes(src).is_empty(), "{src}: {:?}", codes(src));
        }
        // A loss helper of the file: its graph is carried over (the eval's GPT-2 loop).
        let src = "def compute_loss(model, batch):\n    logits = model(batch)\n    loss = F.cross_entropy(logits, batch)\n    return loss\n\nhistory = None\nfor step in range(3):\n    loss = compute_loss(model, make_batch(step))\n    if history is not None:\n        loss = loss + 0.1 * history\n    history = loss\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS324".into(), 11)]);
        // A function of the file that runs a model returns a graph.
        let src = "def embed(x):\n    return encoder(x).mean(0)\n\nprotos = embed(support)\nfor q in data:\n    loss = (encoder(q) - protos).pow(2).sum()\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS324".into(), 4)]);
        // A weight computed once from a model the loop runs is a graph, getter or not.
        let src = "w = model.get_weight()\nfor x in data:\n    loss = (model(x) @ w).sum()\n    accelerator.backward(loss)\n";
        assert_eq!(codes(src), vec![("GS324".into(), 1)]);
    }

    #[test]
    fn a_loop_in_a_function_reads_what_its_caller_made_before_it() {
        let def = "import torch\nencoder = make()\nopt = torch.optim.Adam(encoder.parameters())\nprototypes = encoder(support).mean(1)\n";
        let body = "    for step in range(3):\n        loss = F.cross_entropy(-torch.cdist(encoder(q), prototypes), y)\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n";
        for (head, call) in [
            // A global the function reads; a parameter a call passes (by position, by keyword).
            ("def train():\n", "train()\n"),
            ("def train(protos):\n", "train(prototypes)\n"),
            (
                "def train(enc, protos):\n",
                "train(encoder, protos=prototypes)\n",
            ),
        ] {
            let body = if head.contains("protos") {
                body.replace(", prototypes)", ", protos)")
            } else {
                body.to_owned()
            };
            let src = format!("{def}{head}{body}{call}");
            assert_eq!(codes(&src), vec![("GS324".into(), 4)], "{src}");
        }
        // A method of a class of the script's own, run on an instance.
        let src = format!(
            "{def}class Trainer:\n    def fit(self):\n{}Trainer().fit()\n",
            body.replace("\n    ", "\n        ")
                .replacen("    for", "        for", 1)
        );
        assert_eq!(codes(&src), vec![("GS324".into(), 4)], "{src}");
        // Made inside the function, or made under no_grad before the call: not this rule's.
        let quiet = [
            format!("{}\ndef train():\n    prototypes = encoder(support).mean(1).detach()\n{body}train()\n", def.replace("prototypes = encoder(support).mean(1)\n", "")),
            format!("{}with torch.no_grad():\n    prototypes = encoder(support).mean(1)\ndef train():\n{body}train()\n", def.replace("prototypes = encoder(support).mean(1)\n", "")),
        ];
        for src in &quiet {
            assert!(codes(src).is_empty(), "{src}");
        }
    }

    #[test]
    fn a_frameworks_object_is_not_a_graph_carried_into_the_loop() {
        // Accelerate's FSDP2 benchmark: `accelerator` comes from a helper with the model.
        let src = "def train(model, optimizer, loader, accelerator):\n    for batch in loader:\n        optimizer.zero_grad()\n        loss = model(**batch).loss\n        accelerator.backward(loss)\n        optimizer.step()\n\ndef evaluate(args, init_fn):\n    model, optimizer, loader, accelerator = init_fn(args)\n    return train(model, optimizer, loader, accelerator)\n";
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        let top = "model, optimizer, loader, accelerator = init_fn(args)\nfor batch in loader:\n    loss = model(**batch).loss\n    accelerator.backward(loss)\n    optimizer.step()\n";
        assert!(codes(top).is_empty(), "{:?}", codes(top));
        // The loss handed to the framework's backward is still followed.
        let carried = "history = None\nfor batch in loader:\n    loss = model(batch).sum()\n    if history is not None:\n        loss = loss + history\n    history = loss\n    accelerator.backward(loss)\n";
        assert_eq!(codes(carried), vec![("GS324".into(), 6)]);
    }

    #[test]
    fn detached_state_counters_and_logged_numbers_are_fine() {
        let ok = [
            "hidden = None\nfor x, y in data:\n    if hidden is not None:\n        hidden = hidden.detach()\n    out, hidden = model(x, hidden)\n    loss = crit(out, y)\n    loss.backward()\n",
            "hidden = init()\nfor x, y in data:\n    hidden = repackage_hidden(hidden)\n    out, hidden = model(x, hidden)\n    loss = crit(out, y)\n    loss.backward()\n",
            "for x, y in data:\n    out, hidden = model(x, hidden)\n    loss = crit(out, y)\n    loss.backward()\n    hidden = hidden.detach()\n",
            "state = None\nfor x, y in data:\n    out, state = model(x, state)\n    state = tuple(s.detach() for s in state)\n    loss = crit(out, y)\n    loss.backward()\n",
            "n = 0\ntotal = 0.0\nfor x in data:\n    n = n + 1\n    loss = model(x).sum() / n\n    loss.backward()\n    total += loss.item()\n",
            "ema = None\nfor x in data:\n    loss = model(x).sum()\n    loss.backward()\n    ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()\n",
            "for step in range(10):\n    loss = model(make_batch(step)).sum()\n    loss.backward()\n    opt.step()\n",
            // An input shuffled or augmented for the next iteration, a model fetched again.
            "for idx in range(3):\n    loss = model(input).sum()\n    loss.backward()\n    input = input[torch.randperm(4)]\n",
            "for x in data:\n    x = x + torch.randn_like(x) * noise\n    loss = model(x).sum()\n    loss.backward()\n",
            "for batch in data:\n    loss_fn(m(batch)).backward()\n    m = rpc.rpc_sync(owner, update, args=(grads,))\n",
            // Features of a frozen backbone computed under `no_grad`, then a classifier on
            // them (DINO's linear evaluation).
            "for x, y in data:\n    with torch.no_grad():\n        out = backbone(x)\n    out = clf(out)\n    loss = crit(out, y)\n    loss.backward()\n",
            // An environment's observation, from an action read as a number (REINFORCE).
            "env = gym.make('CartPole-v1')\nobs, _ = env.reset()\nfor episode in range(10):\n    logits = policy(torch.as_tensor(obs))\n    action = logits.argmax()\n    obs, reward, done, trunc, info = env.step(action.item())\n    loss = -logits.log_softmax(-1)[action] * reward\n    loss.backward()\n",
            // Statistics moved to the latents' device and dtype each step (diffusers' SDXL
            // DreamBooth): `.device` and `.dtype` carry no graph.
            "for batch in data:\n    x = vae.encode(batch).sample()\n    mean = mean.to(device=x.device, dtype=x.dtype)\n    loss = (unet(x - mean) ** 2).mean()\n    loss.backward()\n",
            "for batch in data:\n    x = model(batch)\n    scale = scale.type_as(x)[: x.size(0)]\n    loss = (x * scale).sum()\n    loss.backward()\n",
            // A module moved between devices, offloaded after use.
            "for batch in data:\n    vae = vae.to('cuda')\n    x = vae.encode(batch).latent\n    vae = vae.to('cpu')\n    loss = unet(x).sum()\n    loss.backward()\n",
            // A comprehension's own loop variable is not the name outside it.
            "for batch in data:\n    mask = torch.stack([F.interpolate(mask, size=8) for mask in batch['masks']])\n    loss = unet(torch.cat([batch['x'], mask])).sum()\n    loss.backward()\n",
        ];
        for src in ok {
            assert!(codes(src).is_empty(), "{src}: {:?}", codes(src));
        }
    }
}
