//! The op log's analysis on recorded op sequences: each `tests/fixtures/*.json` is one step of
//! a training script as the function mode would see it (ops with their inputs, outputs,
//! grad mode and source lines), replayed through a synthetic autograd world, and the cuts,
//! attributions and in-place records the log writes into the capture are compared with the
//! fixture's `expect`.
//!
//! The world builds the graph as autograd would: an op whose output requires grad makes a node
//! whose inputs are its tensor inputs' nodes (a leaf's `AccumulateGrad`); an in-place op bumps
//! its target's version and gives it a new node. Which parameters the backward did not reach
//! is computed by walking back from the loss, independently of the log.

use std::collections::HashMap;
use std::path::Path;

use gradsleuth_capture::oplog::{Call, Callee, Host, InplaceTarget, SeqKind};
use gradsleuth_capture::{OpLog, Recorder, Site};
use gradsleuth_graph::GraphSource;
use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::{json, Value};

const FILE: &str = "/fixture/train.py";

#[derive(Clone, Debug)]
enum Obj {
    Tensor {
        requires_grad: bool,
        node: Option<u32>,
        version: u64,
        shape: Vec<i64>,
    },
    Float,
    Bool(bool),
    List(Vec<usize>),
    Tuple(Vec<usize>),
    Func {
        qual: String,
        owner: Option<String>,
    },
}

struct Node {
    name: String,
    children: Vec<u32>,
    leaf: Option<u64>,
    seq: u64,
}

/// The synthetic world: objects by address (each with a generation, so a freed address can
/// be reused by a new object), autograd nodes, grad mode, the user's stack.
#[derive(Default)]
struct World {
    objs: HashMap<usize, (u32, Obj)>,
    next_addr: usize,
    nodes: Vec<Node>,
    accumulate: HashMap<usize, u32>,
    grad_enabled: bool,
    seq: u64,
    stack: Vec<Site>,
    /// The call the user's innermost frame is making (a step's `callee`).
    callee: Option<Callee>,
    /// A function transform's wrapper -> the tensor it wraps (`vmap`'s batched tensors).
    inner: HashMap<usize, usize>,
}

impl World {
    fn alloc(&mut self, obj: Obj, at: Option<usize>) -> usize {
        let addr = at.unwrap_or_else(|| {
            self.next_addr += 16;
            self.next_addr
        });
        let gen = self.objs.get(&addr).map_or(0, |(g, _)| g + 1);
        self.objs.insert(addr, (gen, obj));
        addr
    }

    fn obj(&self, addr: usize) -> &Obj {
        &self.objs[&addr].1
    }

    fn new_node(&mut self, name: String, children: Vec<u32>, leaf: Option<u64>) -> u32 {
        self.seq += 1;
        self.nodes.push(Node {
            name,
            children,
            leaf,
            seq: self.seq,
        });
        self.nodes.len() as u32 - 1
    }

    /// The node an op's output hangs from for input `addr`: its grad_fn, or its leaf's
    /// `AccumulateGrad`.
    fn edge(&mut self, addr: usize) -> Option<u32> {
        if let Some(inner) = self.inner.get(&addr) {
            // A transform's wrapper: the gradient goes to what it wraps.
            return self.edge(*inner);
        }
        match self.obj(addr).clone() {
            Obj::Tensor {
                requires_grad: true,
                node: Some(n),
                ..
            } => Some(n),
            Obj::Tensor {
                requires_grad: true,
                node: None,
                ..
            } => {
                if let Some(n) = self.accumulate.get(&addr) {
                    return Some(*n);
                }
                // Leaf accumulators take no sequence number (torch gives them UINT64_MAX).
                self.nodes.push(Node {
                    name: "AccumulateGrad".into(),
                    children: Vec::new(),
                    leaf: Some(addr as u64),
                    seq: u64::MAX,
                });
                let n = self.nodes.len() as u32 - 1;
                self.accumulate.insert(addr, n);
                Some(n)
            }
            _ => None,
        }
    }
}

struct Fake<'w>(&'w mut World);

impl GraphSource for Fake<'_> {
    type Node = u32;
    type Id = usize;
    type Error = String;

    fn id(&self, node: &u32) -> usize {
        *node as usize
    }

    fn children(&mut self, node: &u32, out: &mut Vec<u32>) -> Result<(), String> {
        out.extend(&self.0.nodes[*node as usize].children);
        Ok(())
    }

    fn leaf(&mut self, node: &u32) -> Result<Option<u64>, String> {
        Ok(self.0.nodes[*node as usize].leaf)
    }
}

impl Host for Fake<'_> {
    type Value = usize;
    type Keeper = (usize, u32);
    type Kept = u32;

    fn addr(&self, v: &usize) -> usize {
        *v
    }

    fn keep(&self, v: &usize) -> (usize, u32) {
        (*v, self.0.objs[v].0)
    }

    fn holds(&self, k: &(usize, u32), v: &usize) -> bool {
        self.0.objs.get(v).is_some_and(|(g, _)| *g == k.1)
    }

    fn is_tensor(&self, v: &usize) -> bool {
        matches!(self.0.obj(*v), Obj::Tensor { .. })
    }

    fn is_float(&self, v: &usize) -> bool {
        matches!(self.0.obj(*v), Obj::Float)
    }

    fn items(&self, v: &usize, tl: usize, ll: usize) -> Option<(SeqKind, Vec<usize>)> {
        match self.0.obj(*v) {
            Obj::Tuple(x) => Some((SeqKind::Tuple, x.iter().take(tl).copied().collect())),
            Obj::List(x) => Some((SeqKind::List, x.iter().take(ll).copied().collect())),
            _ => None,
        }
    }

    fn truthy(&self, v: &usize) -> Option<bool> {
        match self.0.obj(*v) {
            Obj::Bool(b) => Some(*b),
            _ => Some(true),
        }
    }

    fn requires_grad(&self, t: &usize) -> Result<bool, String> {
        match self.0.obj(*t) {
            Obj::Tensor { requires_grad, .. } => Ok(*requires_grad),
            _ => Err("not a tensor".into()),
        }
    }

    fn grad_fn(&self, t: &usize) -> Result<Option<u32>, String> {
        match self.0.obj(*t) {
            Obj::Tensor { node, .. } => Ok(*node),
            _ => Err("not a tensor".into()),
        }
    }

    fn node(&self, kept: &u32) -> u32 {
        *kept
    }

    fn node_name(&self, n: &u32) -> String {
        self.0.nodes[*n as usize].name.clone()
    }

    fn node_sequence_nr(&self, n: &u32) -> Option<u64> {
        Some(self.0.nodes[*n as usize].seq)
    }

    fn grad_enabled(&self) -> Result<bool, String> {
        Ok(self.0.grad_enabled)
    }

    fn sequence_nr(&self) -> Option<u64> {
        Some(self.0.seq + 1)
    }

    fn stack(&mut self, depth: usize) -> Vec<Site> {
        self.0.stack.iter().take(depth).cloned().collect()
    }

    fn func_names(&self, f: &usize) -> (String, Option<String>) {
        match self.0.obj(*f) {
            Obj::Func { qual, owner } => (qual.clone(), owner.clone()),
            _ => ("<op>".into(), None),
        }
    }

    fn inplace_target(&self, t: &usize) -> InplaceTarget {
        let Obj::Tensor {
            node,
            version,
            shape,
            ..
        } = self.0.obj(*t)
        else {
            return InplaceTarget::default();
        };
        let name = |n: &u32| self.0.nodes[*n as usize].name.clone();
        InplaceTarget {
            version: *version,
            node: node.as_ref().map(name),
            prev_node: node
                .and_then(|n| self.0.nodes[n as usize].children.first().copied())
                .as_ref()
                .map(name),
            shape: shape.clone(),
        }
    }

    fn inner(&self, t: &usize) -> Option<usize> {
        self.0.inner.get(t).copied()
    }

    fn callee(&mut self) -> Option<Callee> {
        self.0.callee.clone()
    }
}

#[derive(Deserialize)]
struct Fixture {
    #[allow(dead_code)]
    doc: String,
    /// Leaf tensors that require grad (parameter keys 1, 2, ... in order).
    params: Vec<String>,
    /// Leaf tensors that do not.
    #[serde(default)]
    inputs: Vec<String>,
    /// Leaf tensors that require grad and are no parameter (FSDP's flat storage).
    #[serde(default)]
    leaves: Vec<String>,
    ops: Vec<Step>,
    /// Shapes of parameters (default `[4]`).
    #[serde(default)]
    shapes: HashMap<String, Vec<i64>>,
    /// Parameters whose gradient was exactly zero (the soft cuts' pool).
    #[serde(default)]
    zero: Vec<String>,
    /// Parameters the loss's graph reaches but the backward gives nothing (a custom
    /// Function's backward returned None for their input).
    #[serde(default)]
    no_gradient: Vec<String>,
    /// Parameters backward reached whose gradient is gone at the step (`p.grad = None`).
    #[serde(default)]
    cleared: Vec<String>,
    /// The script raised this message (recorded before the log is resolved).
    #[serde(default)]
    script_error: Option<String>,
    expect: Value,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Step {
    /// The torch function's `__qualname__`.
    op: Option<String>,
    /// A descriptor's owner (`data` for `Tensor.data`).
    owner: Option<String>,
    #[serde(rename = "in")]
    inputs: Vec<String>,
    kw: Vec<String>,
    out: Option<String>,
    /// `tensor` (default), `float`, `list`, `tuple:N`, `values_indices`.
    out_kind: Option<String>,
    /// Whether the output requires grad (default: grad mode on and an input requires grad).
    grad: Option<bool>,
    /// The output requires grad but is a leaf (`torch.tensor(v, requires_grad=True)`).
    leaf: bool,
    /// A custom `autograd.Function` of this class is applied at `at` (its forward starts
    /// before this step's op, which stands for its result).
    function: Option<String>,
    /// Its forward returns after this step's op, which stands for its result.
    function_exit: bool,
    /// The output's node name (default: the op's name + `Backward0`).
    node: Option<String>,
    shape: Vec<i64>,
    inplace_kwarg: bool,
    /// The user's frames, innermost first (lines of train.py).
    at: Vec<u32>,
    /// `[frame, name]`: the op runs inside a call the user's innermost frame makes, the
    /// frame (an identity; equal numbers are one frame) running code shown as `name`.
    callee: Option<(usize, String)>,
    /// The op raised this message.
    fails: Option<String>,
    /// `[name, parameters]`: an optimizer's step (`Adam.step()`, its own ops unseen) writes
    /// these parameters in place, as the tracer tells the log after it.
    optimizer_step: Option<(String, Vec<String>)>,
    /// `loss`: a backward starts from this tensor.
    backward: Option<String>,
    /// Backward raised this message.
    backward_error: Option<String>,
    /// The user's code entered `torch.inference_mode()` at `at`: `"before_window"` (seen by
    /// the tracer only: the op-level window was not open yet) or `"in_window"` (the log is
    /// told too).
    inference_entered: Option<String>,
    /// A reentrant checkpointed forward whose inputs need no grad starts at `at` (`true`) or
    /// returns (`false`), as the tracer tells the log.
    checkpoint: Option<bool>,
    /// Recording turns on/off without an op the log sees (`inference_mode`'s C++ guard).
    grad_mode: Option<bool>,
    /// Capture begins with recording already off, at this step's lines (the tracer's
    /// `grad_disabled_at_start`: a step called under a caller's `no_grad`).
    off_at_start: bool,
    /// The output's node depends on these names' nodes instead of its inputs' (the
    /// derivative `autograd.grad(..., create_graph=True)` returns depends on what it does).
    deps: Option<Vec<String>>,
    /// The running module changes (`null`: no module).
    #[serde(deserialize_with = "present")]
    module: Option<Option<u64>>,
    /// A graph snapshot from this tensor.
    graph: Option<String>,
    /// Frees this name (its address may be reused).
    free: Option<String>,
    /// `[tensor, parameter]`: a module runs on the tensor in place of the parameter.
    stand_in: Option<(String, String)>,
    /// A new Python float named so, at the address of `reuse` if given.
    value: Option<String>,
    /// A new tensor named so, made by a call the mode does not see (`torch.Tensor(values)`),
    /// needing no grad, of `shape`.
    unseen: Option<String>,
    reuse: Option<String>,
    /// The function is a short-lived object made for this call (a descriptor's bound
    /// `__get__`), at the address the last such object had.
    transient: bool,
    /// `[tensor, wrapper]`: a function transform wraps the tensor (no op the mode sees; the
    /// wrapper has the tensor's grad and node), as `vmap` does to its inputs.
    wrap: Option<(String, String)>,
    /// The op's output is a transform's wrapper around a new tensor named so: what the
    /// transform hands back when it returns (`vmap`'s output).
    inner: Option<String>,
}

/// A field that is present, even as `null`, is `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

fn short_node(op: &str) -> String {
    let last = op.rsplit('.').next().unwrap_or(op).trim_matches('_');
    let mut c = last.chars();
    let first = c.next().map(|c| c.to_ascii_uppercase()).unwrap_or('X');
    format!("{first}{}Backward0", c.as_str())
}

fn run_fixture(path: &Path) -> Value {
    let fx: Fixture = serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut w = World {
        grad_enabled: true,
        ..Default::default()
    };
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut keys: FxHashMap<usize, u64> = FxHashMap::default();
    // Leaf tensors: the parameters, the inputs (no grad), other leaves needing grad.
    let leaf = |w: &mut World, requires_grad: bool| {
        w.alloc(
            Obj::Tensor {
                requires_grad,
                node: None,
                version: 0,
                shape: vec![4],
            },
            None,
        )
    };
    for (i, p) in fx.params.iter().enumerate() {
        let a = leaf(&mut w, true);
        if let (Some(shape), Some((_, Obj::Tensor { shape: s, .. }))) =
            (fx.shapes.get(p), w.objs.get_mut(&a))
        {
            *s = shape.clone();
        }
        names.insert(p.clone(), a);
        keys.insert(a, i as u64 + 1);
    }
    for x in &fx.inputs {
        names.insert(x.clone(), leaf(&mut w, false));
    }
    for x in &fx.leaves {
        names.insert(x.clone(), leaf(&mut w, true));
    }
    for lit in [false, true] {
        let a = w.alloc(Obj::Bool(lit), None);
        names.insert(lit.to_string(), a);
    }
    let key_name: HashMap<u64, String> = fx
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| (i as u64 + 1, p.clone()))
        .collect();
    let mut recorder = Recorder::new("run", 1, None, Vec::new());
    let mut log: OpLog<(usize, u32), u32> = OpLog::new(1);
    let mut funcs: HashMap<(String, Option<String>), usize> = HashMap::new();
    let mut last_transient: Option<usize> = None;
    let mut losses: Vec<usize> = Vec::new();
    for step in &fx.ops {
        w.stack = step
            .at
            .iter()
            .map(|l| Site::new(FILE, *l, "forward"))
            .collect();
        w.callee = step.callee.as_ref().map(|(frame, name)| Callee {
            id: (*frame, 0),
            name: name.clone(),
            decorated: false,
        });
        if let Some(m) = step.module {
            log.set_module(&Fake(&mut w), m);
        }
        if let Some(v) = &step.value {
            let at = step.reuse.as_ref().map(|r| names[r]);
            let a = w.alloc(Obj::Float, at);
            names.insert(v.clone(), a);
        }
        if let Some(u) = &step.unseen {
            let a = w.alloc(
                Obj::Tensor {
                    requires_grad: false,
                    node: None,
                    version: 0,
                    shape: step.shape.clone(),
                },
                None,
            );
            names.insert(u.clone(), a);
        }
        if let Some(f) = &step.free {
            names.remove(f);
        }
        if let Some((t, wrapper)) = &step.wrap {
            let obj = w.obj(names[t]).clone();
            let a = w.alloc(obj, None);
            w.inner.insert(a, names[t]);
            names.insert(wrapper.clone(), a);
        }
        if let Some((t, p)) = &step.stand_in {
            log.stand_in(&Fake(&mut w), &names[t], names[p]);
        }
        if let Some(l) = &step.backward {
            log.loss(&mut Fake(&mut w), &names[l]);
            losses.push(names[l]);
        }
        if let Some((name, params)) = &step.optimizer_step {
            let mut written = Vec::new();
            for p in params {
                let a = names[p];
                if let Some((_, Obj::Tensor { version, .. })) = w.objs.get_mut(&a) {
                    *version += 1;
                }
                written.push((a, keys[&a]));
            }
            log.optimizer_step(&mut Fake(&mut w), name, &written);
        }
        if let Some(msg) = &step.backward_error {
            log.explain_error(&mut recorder, msg);
        }
        if let Some(on) = step.grad_mode {
            w.grad_enabled = on;
        }
        if step.off_at_start {
            w.grad_enabled = false;
            log.grad_disabled_at_start(&mut Fake(&mut w));
        }
        if let Some(when) = &step.inference_entered {
            let site = w.stack.first().cloned().unwrap();
            recorder.inference_entered(&(&site).into());
            if when == "in_window" {
                log.inference_entered(&mut Fake(&mut w));
            }
        }
        match step.checkpoint {
            Some(true) => log.checkpoint_entered(&mut Fake(&mut w)),
            Some(false) => log.checkpoint_exited(),
            None => {}
        }
        if let Some(name) = &step.function {
            log.function_entered(&mut Fake(&mut w), name);
        }
        if let Some(g) = &step.graph {
            let loss = names[g];
            log.graph(&mut Fake(&mut w), &mut recorder, &loss, &keys, 1000)
                .unwrap();
        }
        let Some(op) = &step.op else { continue };
        let fkey = (op.clone(), step.owner.clone());
        let func = match funcs.get(&fkey) {
            _ if step.transient => {
                let f = w.alloc(
                    Obj::Func {
                        qual: op.clone(),
                        owner: step.owner.clone(),
                    },
                    last_transient,
                );
                last_transient = Some(f);
                f
            }
            Some(f) => *f,
            None => {
                let f = w.alloc(
                    Obj::Func {
                        qual: op.clone(),
                        owner: step.owner.clone(),
                    },
                    None,
                );
                funcs.insert(fkey, f);
                f
            }
        };
        let args: Vec<usize> = step.inputs.iter().map(|n| names[n]).collect();
        let kwargs: Vec<usize> = step.kw.iter().map(|n| names[n]).collect();
        if let Some(msg) = &step.fails {
            let inputs: Vec<usize> = args.iter().chain(&kwargs).copied().collect();
            log.failed(&mut Fake(&mut w), &mut recorder, &func, &inputs, msg);
            continue;
        }
        if op.ends_with("set_grad_enabled") {
            w.grad_enabled = matches!(w.obj(args[0]), Obj::Bool(true));
        }
        let tensor_inputs: Vec<usize> = args
            .iter()
            .chain(&kwargs)
            .copied()
            .filter(|a| matches!(w.obj(*a), Obj::Tensor { .. }))
            .collect();
        let node_inputs: Vec<usize> = match &step.deps {
            Some(d) => d.iter().map(|n| names[n]).collect(),
            None => tensor_inputs.clone(),
        };
        let any_grad = tensor_inputs.iter().any(|a| {
            matches!(
                w.obj(*a),
                Obj::Tensor {
                    requires_grad: true,
                    ..
                }
            )
        });
        let grad = step.grad.unwrap_or(w.grad_enabled && any_grad);
        let out_name = step.out.clone().unwrap_or_else(|| "_".into());
        let node_name = step.node.clone().unwrap_or_else(|| short_node(op));
        let make_tensor = |w: &mut World, at: Option<usize>| {
            let node = if grad && !step.leaf {
                let children: Vec<u32> = node_inputs.iter().filter_map(|a| w.edge(*a)).collect();
                Some(w.new_node(node_name.clone(), children, None))
            } else {
                None
            };
            let version = at.map_or(0, |a| match w.obj(a) {
                Obj::Tensor { version, .. } => version + 1,
                _ => 0,
            });
            let obj = Obj::Tensor {
                requires_grad: grad,
                node,
                version,
                shape: if step.shape.is_empty() {
                    vec![4]
                } else {
                    step.shape.clone()
                },
            };
            match at {
                // In place: the same object, a new version and node.
                Some(a) => {
                    let gen = w.objs[&a].0;
                    w.objs.insert(a, (gen, obj));
                    a
                }
                None => w.alloc(obj, None),
            }
        };
        // What the host reads before `detach_` runs: the history it is about to drop.
        let dropped = if op.ends_with(".detach_") {
            args.first().and_then(|a| match w.obj(*a) {
                Obj::Tensor { node, .. } => *node,
                _ => None,
            })
        } else {
            None
        };
        let in_place = step.inputs.first() == step.out.as_ref();
        let out = match step.out_kind.as_deref().unwrap_or("tensor") {
            "tensor" => make_tensor(&mut w, in_place.then(|| args[0])),
            "float" => w.alloc(Obj::Float, None),
            "list" => {
                let items = vec![w.alloc(Obj::Float, None), w.alloc(Obj::Float, None)];
                w.alloc(Obj::List(items), None)
            }
            k if k.starts_with("tuple:") => {
                let n: usize = k[6..].parse().unwrap();
                let items: Vec<usize> = (0..n).map(|_| make_tensor(&mut w, None)).collect();
                for (i, a) in items.iter().enumerate() {
                    names.insert(format!("{out_name}.{i}"), *a);
                }
                w.alloc(Obj::Tuple(items), None)
            }
            // `x.max(dim)`, `topk`, `sort`: `(values, indices)`, the indices needing no grad.
            "values_indices" => {
                let values = make_tensor(&mut w, None);
                let indices = w.alloc(
                    Obj::Tensor {
                        requires_grad: false,
                        node: None,
                        version: 0,
                        shape: vec![4],
                    },
                    None,
                );
                names.insert(format!("{out_name}.0"), values);
                names.insert(format!("{out_name}.1"), indices);
                w.alloc(Obj::Tuple(vec![values, indices]), None)
            }
            k => panic!("out_kind {k}"),
        };
        names.insert(out_name, out);
        if let Some(u) = &step.inner {
            let obj = w.obj(out).clone();
            let a = w.alloc(obj, None);
            w.inner.insert(out, a);
            names.insert(u.clone(), a);
        }
        let call = Call {
            func,
            args,
            kwargs,
            inplace_kwarg: step.inplace_kwarg,
            out,
            dropped,
        };
        log.op(&mut Fake(&mut w), call);
        if step.function_exit {
            log.function_exited(&Fake(&mut w), Some(&out));
        }
    }
    // The backward: which parameters the losses reach (walking the world's graph).
    let mut reached: Vec<u64> = Vec::new();
    let roots: Vec<u32> = losses
        .iter()
        .filter_map(|l| match w.obj(*l) {
            Obj::Tensor { node, .. } => *node,
            _ => None,
        })
        .collect();
    let walk = gradsleuth_graph::walk(&mut Fake(&mut w), roots, 1_000_000).unwrap();
    reached.extend(walk.leaves);
    for l in &losses {
        reached.push(*l as u64);
    }
    let zero: FxHashMap<usize, u64> = fx
        .zero
        .iter()
        .map(|n| (names[n], keys[&names[n]]))
        .collect();
    let no_gradient: Vec<u64> = fx.no_gradient.iter().map(|n| names[n] as u64).collect();
    let unreached: FxHashMap<usize, u64> = keys
        .iter()
        .filter(|(a, _)| !reached.contains(&(**a as u64)) || no_gradient.contains(&(**a as u64)))
        .map(|(a, k)| (*a, *k))
        .collect();
    let cleared: FxHashMap<usize, u64> = fx
        .cleared
        .iter()
        .map(|n| (names[n], keys[&names[n]]))
        .collect();
    if let Some(message) = &fx.script_error {
        let at = gradsleuth_capture::At::new("train.py", 1, None);
        recorder.set_error(
            "RuntimeError".into(),
            message.clone(),
            &at,
            Vec::new(),
            None,
        );
    }
    log.resolve(
        &mut Fake(&mut w),
        &mut recorder,
        &unreached,
        &zero,
        &cleared,
    );
    let line = |l: &Option<gradsleuth_model::Location>| l.as_ref().map(|l| l.line);
    let cuts: Vec<Value> = recorder
        .capture
        .cuts
        .iter()
        .map(|c| {
            let mut params: Vec<&str> = c.params.iter().map(|k| key_name[k].as_str()).collect();
            params.sort_unstable();
            json!({
                "kind": c.kind,
                "op": c.op,
                "line": line(&c.location),
                "params": params,
                "related": c.related.iter().map(|r| json!([r.location.line, r.message])).collect::<Vec<_>>(),
                "chain": c.chain,
                "chain_from": c.chain_from.map(|k| key_name[&k].clone()),
                "within": c.within,
            })
        })
        .collect();
    let inplace: Vec<Value> = recorder
        .capture
        .inplace
        .iter()
        .map(|r| {
            json!({
                "kind": r.kind,
                "op": r.op,
                "line": line(&r.location),
                "created_at": line(&r.created_at),
                "saved_at": line(&r.saved_at),
                "node": r.node,
                "version": r.version,
                "param": r.param.map(|k| key_name[&k].clone()),
            })
        })
        .collect();
    let graph = recorder.capture.graph.as_ref().map(|g| {
        json!({
            "nodes": g.nodes.iter().map(|n| json!([n.name, n.module, n.param.map(|k| key_name[&k].clone())])).collect::<Vec<_>>(),
            "edges": g.edges.len(),
        })
    });
    let unreached_names: Vec<&str> = {
        let mut v: Vec<&str> = unreached.values().map(|k| key_name[k].as_str()).collect();
        v.sort_unstable();
        v
    };
    let _ = fx.expect;
    json!({"cuts": cuts, "inplace": inplace, "graph": graph, "unreached": unreached_names,
           "unused_outputs": recorder.capture.unused_outputs,
           "unread_params": recorder.capture.unread_params.iter().map(|k| key_name[k].as_str()).collect::<Vec<_>>()})
}

/// `expect` matches `got` when every key it names matches (objects: recursively; arrays:
/// the same length, element by element).
fn matches(expect: &Value, got: &Value) -> bool {
    match (expect, got) {
        (Value::Object(e), Value::Object(g)) => e
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| matches(v, gv))),
        (Value::Array(e), Value::Array(g)) => {
            e.len() == g.len() && e.iter().zip(g).all(|(a, b)| matches(a, b))
        }
        _ => expect == got,
    }
}

#[test]
fn fixtures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 12, "{} fixtures", paths.len());
    let mut failed = Vec::new();
    for p in &paths {
        let fx: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let got = run_fixture(p);
        if !matches(&fx["expect"], &got) {
            failed.push(format!(
                "{}:\n  expected {}\n  got      {}",
                p.file_name().unwrap().to_string_lossy(),
                fx["expect"],
                got
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Every cut kind the log can write is covered by a fixture.
#[test]
fn every_cut_kind_has_a_fixture() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut seen = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let got = run_fixture(&p);
        for c in got["cuts"]
            .as_array()
            .unwrap()
            .iter()
            .chain(got["inplace"].as_array().unwrap())
        {
            seen.insert(c["kind"].as_str().unwrap().to_owned());
        }
    }
    for kind in [
        "detach",
        "data_attr",
        "numpy_roundtrip",
        "rewrap",
        "create_graph",
        "no_grad",
        "non_differentiable",
        "dead_path",
        "loss_rewrap",
        "inplace_saved",
        "inplace_leaf",
    ] {
        assert!(
            seen.contains(kind),
            "no fixture writes a `{kind}` cut: {seen:?}"
        );
    }
}
