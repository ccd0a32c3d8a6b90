//! Op-level capture: every torch call the user's code makes during the deep step arrives here
//! (in the product, from the tracer's `TorchFunctionMode`, which only forwards). For each op
//! this records:
//!
//! * **cuts**: inputs need grad, outputs do not (or the output is a Python value). Each cut is
//!   classified from the op (`detach`, `.data`, a grad-disabled region, `torch.tensor(t)`,
//!   argmax-like ops, `.item()`/`.tolist()`/`.numpy()` exits) and keeps its inputs' autograd
//!   nodes until the step is resolved;
//! * **taint**: which cuts each tensor (and each Python value that left the graph) depends on,
//!   so a value that comes back through `torch.tensor(values)` is linked to where it left,
//!   and the loss knows which cuts it depends on;
//! * **in-place ops**, with where their target was created and first consumed, so an
//!   "modified by an inplace operation" error can be answered with the exact lines.
//!
//! At the end of the step, [`OpLog::resolve`] walks back from the cuts the loss depends on and
//! attributes every parameter the backward did not reach to the cut on its path, writing
//! [`CutRec`]s into the capture. Identities are object addresses, valid within one step; a
//! new output at a reused address resets what was known about the address, and an entry
//! counts only while the host's keeper says the address still holds the same object.
//!
//! A sharded model runs its layers on stand-ins of its parameters (FSDP's views of a flat
//! parameter, unsharded copies): the tracer names them ([`OpLog::stand_in`]) and the walks read
//! each as the parameter it stands for.
//!
//! Everything the analysis asks of a value or a node goes through [`Host`].

pub mod classify;
pub mod inplace;
pub mod step_end;

use std::sync::Arc;

use gradsleuth_graph::{path_to_leaf, walk as walk_graph, walk_visit, GraphSource};
use gradsleuth_model::capture::{
    CutRec, GraphNode, GraphRec, InplaceRec, Within, CHECKPOINT_OP, FUNCTION_APPLY_SUFFIX,
    INDICES_SUFFIX, INSIDE_LIBRARY, SAMPLERS,
};
use gradsleuth_model::{Category, Related};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::recorder::{refuses_inference_tensor, tells_inference, Recorder};
use crate::site::Site;
use classify::{classify, FuncInfo, Kind};
pub use inplace::{parse_inplace_error, InplaceError};

/// A tuple or a list (the two sequences the op log looks into).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SeqKind {
    Tuple,
    List,
}

/// What an in-place op's target looks like right after the op.
#[derive(Clone, Debug, Default)]
pub struct InplaceTarget {
    /// Its version counter (`_version`).
    pub version: u64,
    /// Its autograd node's type now (errors may name this one).
    pub node: Option<String>,
    /// The type of that node's first input: the tensor's node before the op.
    pub prev_node: Option<String>,
    pub shape: Vec<i64>,
}

/// What the op log needs to know about the host's values (tensors, Python values, functions)
/// and autograd nodes. The graph walks go through the [`GraphSource`] it also is.
pub trait Host: GraphSource<Id = usize, Node: Clone> {
    /// A value an op saw: an argument, its result, the function itself.
    type Value: Clone;
    /// Proof that an address still holds the object an entry was made for.
    type Keeper;
    /// An autograd node kept across ops until the step is resolved.
    type Kept;

    fn addr(&self, v: &Self::Value) -> usize;
    fn keep(&self, v: &Self::Value) -> Self::Keeper;
    fn holds(&self, k: &Self::Keeper, v: &Self::Value) -> bool;
    fn is_tensor(&self, v: &Self::Value) -> bool;
    /// The items of a tuple (at most `tuple_limit`) or a list (at most `list_limit`), or None
    /// for anything else.
    fn items(
        &self,
        v: &Self::Value,
        tuple_limit: usize,
        list_limit: usize,
    ) -> Option<(SeqKind, Vec<Self::Value>)>;
    fn truthy(&self, v: &Self::Value) -> Option<bool>;
    fn requires_grad(&self, t: &Self::Value) -> Result<bool, Self::Error>;
    /// The tensor's autograd node, None for a leaf (or no tensor).
    fn grad_fn(&self, t: &Self::Value) -> Result<Option<Self::Kept>, Self::Error>;
    fn node(&self, kept: &Self::Kept) -> Self::Node;
    fn node_name(&self, n: &Self::Node) -> String;
    /// The node's autograd sequence number.
    fn node_sequence_nr(&self, n: &Self::Node) -> Option<u64>;
    /// Whether gradient recording is on now.
    fn grad_enabled(&self) -> Result<bool, Self::Error>;
    /// The thread's autograd sequence counter now.
    fn sequence_nr(&self) -> Option<u64>;
    /// Up to `depth` frames of the user's code calling the op, innermost first.
    fn stack(&mut self, depth: usize) -> Vec<Site>;
    /// (`__qualname__` or `__name__`, the owner's `__name__` for descriptors) of a function.
    fn func_names(&self, f: &Self::Value) -> (String, Option<String>);
    fn inplace_target(&self, t: &Self::Value) -> InplaceTarget;
    /// A Python float (what `.item()` / `float(t)` of a floating-point tensor return).
    fn is_float(&self, _v: &Self::Value) -> bool {
        false
    }
    /// How many numbers the tensor holds.
    fn numel(&self, t: &Self::Value) -> u64 {
        self.inplace_target(t)
            .shape
            .iter()
            .map(|d| u64::try_from(*d).unwrap_or(0))
            .product()
    }
    /// The tensor a function transform wraps one level down (`vmap`'s batched tensor holds
    /// the tensor it was given, and the output it hands back is the one its last op wraps),
    /// None for a plain tensor. The wrapping and unwrapping are no ops a mode sees.
    fn inner(&self, _t: &Self::Value) -> Option<Self::Value> {
        None
    }
    /// The call the user's innermost frame is making while the op runs: the outermost frame
    /// of torch's or a library's code inside it (None when the user's code runs the op
    /// itself, or when the host cannot tell).
    fn callee(&mut self) -> Option<Callee> {
        None
    }
}

/// A call from the user's code into torch or a library ([`Host::callee`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Callee {
    /// The outermost frame inside the user's, while it runs: its address and its code's.
    pub id: (usize, usize),
    /// What the user called, to show (`Normal.sample`, `GenerationMixin.generate`): the
    /// first frame inward that is not a wrapper (a decorator's, `Module.__call__`'s).
    pub name: String,
    /// A torch context decorator (`@torch.no_grad()`) runs among those frames: the call
    /// went through a function so decorated.
    pub decorated: bool,
}

/// A custom `autograd.Function` applied during the step (outermost ones only).
struct FunctionCall {
    /// The sequence number its node takes (the thread's counter when `apply` starts: the
    /// node is made before `forward` runs).
    seq: u64,
    /// Where the user's code applied it.
    site: Option<Site>,
    /// The Function's class.
    name: Arc<str>,
}

/// Where recording was turned off, and the call from the user's code that turned it off.
struct GradOff {
    site: Site,
    callee: Option<Callee>,
    /// When recording was already off as capture began: `site` and the frames that called its
    /// function. A `with torch.no_grad():` (or a decorator) there or a few calls up leaves no
    /// frame of its own, so the source of these lines is where the analysis looks for it.
    callers: Vec<Site>,
}

/// One op: `func(*args, **kwargs)` returned `out`.
pub struct Call<V, N> {
    pub func: V,
    pub args: Vec<V>,
    /// Keyword argument values.
    pub kwargs: Vec<V>,
    /// `inplace=True` was passed.
    pub inplace_kwarg: bool,
    pub out: V,
    /// The first argument's history as it was before an op that drops it in place
    /// (`h.detach_()`): read before the op runs, since afterwards the tensor has none.
    pub dropped: Option<N>,
}

/// How many frames above the start of capture are kept when recording was already off then.
const START_CALLERS: usize = 8;

/// What a round trip's related line says where the value came back.
const COMES_BACK: &str = "the value comes back into torch here";

/// Where a tensor rebuilt from numbers that left autograd is first used: the call that rebuilt
/// it is no torch function (`torch.Tensor(values)`, `torch.FloatTensor(values)`,
/// `torch.from_numpy(array)`).
const REBUILT: &str = "a tensor rebuilt from these numbers by a call the op log cannot see (`torch.Tensor(values)`, `torch.from_numpy(array)`) is first used here";

struct Cut<N> {
    kind: Category,
    /// The output keeps its history but every gradient through it is zero (round, floor,
    /// sign...): it explains zero gradients, not missing ones.
    soft: bool,
    op: Arc<str>,
    site: Option<Site>,
    related: Vec<(Site, &'static str)>,
    /// A `no_grad` cut whose recording was turned off inside the library call the user's
    /// line made (`Normal.sample`): that call's name.
    inside: Option<String>,
    /// Autograd nodes of the inputs that needed grad.
    nodes: Vec<N>,
    /// Addresses of leaf inputs that needed grad (parameters used directly).
    leaves: Vec<usize>,
    /// Autograd nodes of values multiplied with the cut's constant output (`q.long() @ k`):
    /// when that constant is zero, their gradient is exactly zero too.
    siblings: Vec<N>,
    /// A soft cut's output addresses, and the parameters used directly on them
    /// (`round(y) * scale`).
    outputs: Vec<usize>,
    direct: Vec<usize>,
    /// The cuts the inputs carried when this one was made: cuts upstream of it.
    upstream: Vec<u32>,
}

struct Inplace {
    op: Arc<str>,
    site: Option<Site>,
    version: u64,
    prev_node: Option<String>,
    node: Option<String>,
    shape: Vec<i64>,
    created: Option<Site>,
    consumed: Option<Site>,
    /// The parameter an optimizer's step wrote ([`OpLog::optimizer_step`]).
    param: Option<u64>,
}

/// The op log of one deep step, over a host whose keepers are `K` and kept nodes `N`.
pub struct OpLog<K, N> {
    /// (autograd sequence number, module) at each change of the running module: a node made
    /// with number n was made by the module of the last entry at or before n. Read from the
    /// thread's counter, never from `grad_fn`: reading a node from Python gives it a Python
    /// object it keeps, and freeing long chains of those recurses in torch (see
    /// `gradsleuth_graph::MAX_DEPTH`).
    module_timeline: Vec<(u64, Option<u64>)>,
    /// Address of a function -> its classification, with the keeper that says the address
    /// still holds that function: `t.shape` and `t.data` arrive as short-lived method
    /// wrappers of their descriptors, and a freed wrapper's address is soon another's.
    funcs: FxHashMap<usize, (FuncInfo, K)>,
    /// Address -> (cuts it depends on, the object's keeper). Addresses are reused once an
    /// object dies, so an entry counts only while its keeper says it is the same object.
    taint: FxHashMap<usize, (Vec<u32>, K)>,
    /// Tensors made from data alone while recording was off: address -> (the block that
    /// turned it off, keeper). Under `inference_mode` these are inference tensors; the op that
    /// later refuses one is told where it was made.
    off_made: FxHashMap<usize, (Site, K)>,
    values: FxHashMap<usize, (Vec<u32>, K)>,
    /// A backward started (the script's writes to gradients count from here).
    backward_seen: bool,
    /// Between a backward and the next forward: only the script's reads and writes of
    /// gradients are recorded (the rest is logging, clipping, the optimizer's own step).
    pub grads_only: bool,
    /// Gradient tensors the script read after a backward: address -> (the parameter's
    /// address, keeper).
    grads_of: FxHashMap<usize, (usize, K)>,
    /// The script's writes to gradients after a backward (`p.grad = None`,
    /// `p.grad.zero_()`): (the parameter's address, where, the op).
    grad_writes: Vec<(usize, Option<Site>, Arc<str>)>,
    /// Parameters (by address) an optimizer step updated since the last backward: clearing
    /// their gradients now is the usual clear after the step (a GAN's generator's
    /// `zero_grad()` before the discriminator's backward), no write between backward and step.
    stepped: FxHashSet<usize>,
    /// Tensors needing no grad that ops took or returned (address -> keeper): one first seen
    /// as an input was made by code the log does not see (the batch, or a legacy constructor).
    known: FxHashMap<usize, K>,
    /// Numbers that left autograd for Python (`.item()`, `float(t)`, `.tolist()`) and that no
    /// op the log saw took back: (the exit's cuts, how many numbers), in order.
    exits: Vec<(Vec<u32>, u64)>,
    /// Detaches told, at the exit they fed (`x.detach().numpy()`), as the value leaving for
    /// Python: (the cut, its own kind and op, how many related places it had). Provisional:
    /// a detached tensor that reaches the loss itself, not through Python values coming
    /// back, was cut by the detach (`loss = loss.detach()` then `loss.item()` for a log).
    exit_relabels: Vec<(u32, Category, Arc<str>, usize)>,
    /// Cuts whose values came back into torch from Python (a tensor built from them, a float
    /// used as an op's scalar).
    came_back: FxHashSet<u32>,
    cuts: Vec<Cut<N>>,
    grad_off: Vec<GradOff>,
    function_calls: Vec<FunctionCall>,
    /// Graph snapshot nodes that are a custom Function's: (node index, `function_calls` index).
    function_nodes: Vec<(u32, usize)>,
    created: FxHashMap<usize, Site>,
    consumed: FxHashMap<usize, Site>,
    requires_grad_set: FxHashMap<usize, Site>,
    construct_site: FxHashMap<usize, (Site, Vec<u32>)>,
    inplace: Vec<Inplace>,
    loss_taint: Vec<u32>,
    /// Cut -> addresses of the inputs needing grad of ops that used a value the cut tainted.
    /// Only parameters matter (resolve keeps the addresses it knows as parameters; a live
    /// parameter's address is never another object's), so no node is read to tell leaves.
    consumers: FxHashMap<u32, FxHashSet<usize>>,
    loss_rewraps: Vec<(Option<Site>, Vec<u32>)>,
    /// Where the user's code last entered `torch.inference_mode()` during the step (the log
    /// sees no grad-mode op for it).
    inference_block: Option<Site>,
    /// Reentrant checkpointed forwards running now whose inputs need no grad: where each was
    /// called (innermost last).
    checkpoint: Vec<Site>,
    /// How many custom `autograd.Function` forwards run now. Their ops run with recording off
    /// by design and their `backward` carries the gradient across (an identity Function whose
    /// forward returns `x.detach()`, DeepSpeed's ZeRO-3 linear): nothing inside is a cut.
    functions: u32,
    /// The module whose forward runs now.
    current_module: Option<u64>,
    /// Tensors needing grad that a module's forward made and no op has used yet: address ->
    /// module. No keeper (nothing is kept per output on the deep step's path): an output made
    /// at the address of one still waiting means that one died unused.
    made_by: FxHashMap<usize, u64>,
    /// Tensors needing grad that an op read with recording on (an optimizer's update under
    /// `no_grad` reads every parameter and does not count).
    read: FxHashSet<usize>,
    /// Modules with an output that no op ever used (it died, or the step ended, unused): a
    /// pooler whose output the user's loss does not take.
    dropped: FxHashSet<u64>,
    /// Tensors a module ran on in place of its registered (sharded) parameters, with the
    /// views' nodes kept so identities stay valid. FSDP1 with `use_orig_params` runs each
    /// layer on plain views of the unsharded flat parameter, FSDP2 on an unsharded leaf: a
    /// walk reaching either has reached that parameter, not the flat storage every layer of
    /// the unit shares or a copy the optimizer never sees.
    stand_ins: StandInMap,
    stand_in_nodes: Vec<N>,
    /// The custom Functions running now, innermost last: for one that recomputes its forward
    /// in backward ([`RECOMPUTING`]), the leaves needing grad that ops inside used.
    running: Vec<Option<FxHashSet<usize>>>,
    step: u32,
    /// Ops recorded.
    pub ops: u64,
    /// Ops the log could not read (never raised to the user).
    pub errors: u64,
}

/// The most upstream cuts a cut keeps (a cut made downstream of more is never judged to be
/// in series with them: every cut stays told).
const MAX_UPSTREAM: usize = 64;

/// How many function transforms deep (`vmap` of `grad` of ...) a tensor is followed.
const TRANSFORM_LEVELS: usize = 4;
/// Custom `autograd.Function`s whose backward recomputes their forward and differentiates
/// through what it used: reentrant activation checkpointing, torch's and DeepSpeed's (both
/// classes have this name).
const RECOMPUTING: &[&str] = &["CheckpointFunction"];

/// The related place of a cut made inside a reentrant checkpoint: where it was called.
const CHECKPOINTED: &str =
    "reentrant checkpointing runs this forward without recording: none of its inputs requires grad";

/// The tensors function transforms wrapped into `t`, innermost last (at most
/// [`TRANSFORM_LEVELS`]).
fn wrapped<'a, H: Host>(h: &'a H, t: &H::Value) -> impl Iterator<Item = H::Value> + 'a {
    std::iter::successors(h.inner(t), move |u| h.inner(u)).take(TRANSFORM_LEVELS)
}

fn has<T: PartialEq>(v: &[T], x: &T) -> bool {
    v.iter().any(|y| y == x)
}

fn union(into: &mut Vec<u32>, from: &[u32]) {
    for x in from {
        if !has(into, x) {
            into.push(*x);
        }
    }
}

fn short(file: &str) -> &str {
    std::path::Path::new(file)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or(file)
}

/// Stand-ins for parameters (see [`OpLog::stand_in`]): a view's node identity, or a leaf's
/// address, -> the parameter's address. And the leaves a node's backward reaches that its
/// edges do not show (see [`OpLog::function_exited`]): node identity -> leaf addresses.
#[derive(Default)]
struct StandInMap {
    nodes: FxHashMap<usize, usize>,
    leaves: FxHashMap<usize, usize>,
    hidden: FxHashMap<usize, Vec<usize>>,
}

/// The leaves behind `roots` in the host's graph read through `map`: stand-ins as their
/// parameters, and a recomputing node's hidden leaves with its edges'.
fn leaves_behind<H: GraphSource<Id = usize>>(
    h: &mut H,
    map: &StandInMap,
    roots: Vec<H::Node>,
) -> Vec<u64> {
    let mut hidden: Vec<u64> = Vec::new();
    let mut g = StandIns { h, map };
    let Ok(w) = walk_visit(&mut g, roots, 5_000_000, |g, node| {
        if let Some(ls) = map.hidden.get(&g.id(node)) {
            hidden.extend(ls.iter().map(|a| *a as u64));
        }
        Ok(())
    }) else {
        return Vec::new();
    };
    let mut leaves = w.leaves;
    leaves.extend(hidden);
    leaves
}

/// The host's graph with stand-ins read as the parameters they stand for: a view's node as
/// that parameter's leaf (no inputs), a stand-in leaf as the parameter.
struct StandIns<'a, H> {
    h: &'a mut H,
    map: &'a StandInMap,
}

impl<H: GraphSource<Id = usize>> GraphSource for StandIns<'_, H> {
    type Node = H::Node;
    type Id = usize;
    type Error = H::Error;

    fn id(&self, node: &Self::Node) -> usize {
        self.h.id(node)
    }

    fn children(&mut self, node: &Self::Node, out: &mut Vec<Self::Node>) -> Result<(), H::Error> {
        let nodes = &self.map.nodes;
        if nodes.is_empty() || !nodes.contains_key(&self.h.id(node)) {
            self.h.children(node, out)?;
        }
        Ok(())
    }

    fn leaf(&mut self, node: &Self::Node) -> Result<Option<u64>, H::Error> {
        if let Some(addr) = self.map.nodes.get(&self.h.id(node)) {
            return Ok(Some(*addr as u64));
        }
        let leaf = self.h.leaf(node)?;
        Ok(leaf.map(|a| self.map.leaves.get(&(a as usize)).map_or(a, |p| *p as u64)))
    }
}

impl<K, N> OpLog<K, N> {
    /// An empty log for observed step `step`.
    pub fn new(step: u32) -> Self {
        OpLog {
            module_timeline: Vec::new(),
            funcs: Default::default(),
            taint: Default::default(),
            off_made: Default::default(),
            values: Default::default(),
            known: Default::default(),
            exits: Vec::new(),
            exit_relabels: Vec::new(),
            came_back: Default::default(),
            backward_seen: false,
            grads_only: false,
            grads_of: Default::default(),
            grad_writes: Vec::new(),
            stepped: FxHashSet::default(),
            cuts: Vec::new(),
            grad_off: Vec::new(),
            function_calls: Vec::new(),
            function_nodes: Vec::new(),
            created: Default::default(),
            consumed: Default::default(),
            requires_grad_set: Default::default(),
            construct_site: Default::default(),
            inplace: Vec::new(),
            loss_taint: Vec::new(),
            consumers: Default::default(),
            loss_rewraps: Vec::new(),
            inference_block: None,
            checkpoint: Vec::new(),
            functions: 0,
            current_module: None,
            made_by: Default::default(),
            read: Default::default(),
            dropped: Default::default(),
            stand_ins: Default::default(),
            stand_in_nodes: Vec::new(),
            running: Vec::new(),
            step,
            ops: 0,
            errors: 0,
        }
    }

    /// Cuts recorded so far.
    pub fn cut_count(&self) -> usize {
        self.cuts.len()
    }

    /// The module that was running when the node with sequence number `seq` was made.
    /// Leaf accumulators have no number of their own (torch gives them `u64::MAX`): none.
    pub fn module_at(&self, seq: u64) -> Option<u64> {
        if seq == u64::MAX {
            return None;
        }
        let i = self.module_timeline.partition_point(|(s, _)| *s <= seq);
        i.checked_sub(1).and_then(|i| self.module_timeline[i].1)
    }

    /// Drops every kept object and all step state.
    pub fn clear(&mut self) {
        self.cuts.clear();
        self.funcs.clear();
        self.off_made.clear();
        self.consumers.clear();
        self.taint.clear();
        self.values.clear();
        self.known.clear();
        self.exits.clear();
        self.exit_relabels.clear();
        self.came_back.clear();
        self.backward_seen = false;
        self.grads_only = false;
        self.grads_of.clear();
        self.grad_writes.clear();
        self.stepped.clear();
        self.created.clear();
        self.consumed.clear();
        self.requires_grad_set.clear();
        self.construct_site.clear();
        self.inplace.clear();
        self.loss_taint.clear();
        self.loss_rewraps.clear();
        self.grad_off.clear();
        self.function_calls.clear();
        self.function_nodes.clear();
        self.checkpoint.clear();
        self.module_timeline.clear();
        self.current_module = None;
        self.made_by.clear();
        self.read.clear();
        self.dropped.clear();
        self.stand_ins = StandInMap::default();
        self.stand_in_nodes.clear();
        self.running.clear();
    }

    /// An op used `t`: it is no longer a module output waiting for a use.
    fn used<H: Host<Keeper = K, Kept = N>>(&mut self, h: &H, t: &H::Value) {
        if !self.made_by.is_empty() {
            self.made_by.remove(&h.addr(t));
        }
    }

    /// An op made a new tensor at `addr`: an unused module output that lived there before
    /// died unused. A tensor needing grad made inside a module's forward waits for a use.
    fn made(&mut self, addr: usize, needs_grad: bool) {
        if let Some(old) = self.made_by.remove(&addr) {
            self.dropped.insert(old);
        }
        if let (true, Some(m)) = (needs_grad, self.current_module) {
            if self.made_by.len() < 1_000_000 {
                self.made_by.insert(addr, m);
            }
        }
    }

    fn func_info<H: Host<Keeper = K, Kept = N>>(&mut self, h: &H, func: &H::Value) -> FuncInfo {
        let addr = h.addr(func);
        if let Some((info, keeper)) = self.funcs.get(&addr) {
            if h.holds(keeper, func) {
                return info.clone();
            }
        }
        let (qual, owner) = h.func_names(func);
        let info = classify(&qual, owner.as_deref());
        self.funcs.insert(addr, (info.clone(), h.keep(func)));
        info
    }

    /// The module whose forward is running now (from the tracer's module hooks).
    pub fn set_module<H: Host<Keeper = K, Kept = N>>(&mut self, h: &H, key: Option<u64>) {
        self.current_module = key;
        if let Some(seq) = h.sequence_nr() {
            let len = self.module_timeline.len();
            match self.module_timeline.last_mut() {
                Some(last) if last.0 == seq => last.1 = key,
                _ if len < 1_000_000 => self.module_timeline.push((seq, key)),
                _ => {}
            }
        }
    }

    /// A module runs on `t`, a leaf or a view of one, in place of its registered parameter at
    /// address `param` (see `stand_ins`; the caller tells which tensors stand in).
    pub fn stand_in<H: Host<Keeper = K, Kept = N>>(&mut self, h: &H, t: &H::Value, param: usize) {
        if self.stand_in_nodes.len() + self.stand_ins.leaves.len() >= 100_000 {
            return;
        }
        match h.grad_fn(t) {
            Ok(Some(kept)) => {
                let id = h.id(&h.node(&kept));
                self.stand_ins.nodes.insert(id, param);
                self.stand_in_nodes.push(kept);
            }
            Ok(None) => {
                self.stand_ins.leaves.insert(h.addr(t), param);
            }
            Err(_) => {}
        }
    }

    /// The user's code entered `torch.inference_mode()` (told by the tracer: it is no op).
    pub fn inference_entered<H: Host<Keeper = K, Kept = N>>(&mut self, h: &mut H) {
        if let Some(s) = h.stack(1).into_iter().next() {
            self.inference_block = Some(s);
        }
    }

    /// A reentrant checkpointed forward starts (told by the tracer) and none of its inputs
    /// requires grad: what runs inside records nothing, and its output has no history.
    pub fn checkpoint_entered<H: Host<Keeper = K, Kept = N>>(&mut self, h: &mut H) {
        if let Some(s) = h.stack(1).into_iter().next() {
            self.checkpoint.push(s);
        }
    }

    /// The checkpointed forward [`OpLog::checkpoint_entered`] announced returned.
    pub fn checkpoint_exited(&mut self) {
        self.checkpoint.pop();
    }

    /// A custom `autograd.Function` of class `name` is applied (its forward starts; see
    /// `functions`). An outermost one is remembered with the node it makes: its backward
    /// may return no gradient for an input that needs one.
    pub fn function_entered<H: Host<Keeper = K, Kept = N>>(&mut self, h: &mut H, name: &str) {
        if self.functions == 0 && self.function_calls.len() < 4096 {
            if let Some(seq) = h.sequence_nr() {
                self.function_calls.push(FunctionCall {
                    seq,
                    site: h.stack(1).into_iter().next(),
                    name: Arc::from(name),
                });
            }
        }
        self.functions += 1;
        self.running
            .push(RECOMPUTING.contains(&name).then(FxHashSet::default));
    }

    /// That forward returned `out` (None: it raised). A Function that recomputes its forward
    /// in backward (a reentrant checkpoint) differentiates there through the leaves its
    /// forward used, which are no inputs of its node: the node its outputs carry reaches
    /// them for every walk of the log (a cut downstream of a checkpointed layer cuts the
    /// layer's parameters off too). An enclosing one used them as well.
    pub fn function_exited<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &H,
        out: Option<&H::Value>,
    ) {
        self.functions = self.functions.saturating_sub(1);
        let Some(Some(used)) = self.running.pop() else {
            return;
        };
        if let Some(outer) = self.running.iter_mut().rev().find_map(Option::as_mut) {
            outer.extend(used.iter().copied());
        }
        let mut outputs = Vec::new();
        if let Some(out) = out {
            Self::tensors(h, out, &mut outputs);
        }
        for o in &outputs {
            let Ok(Some(kept)) = h.grad_fn(o) else {
                continue;
            };
            let id = h.id(&h.node(&kept));
            if self.stand_ins.hidden.len() < 4096 && !self.stand_ins.hidden.contains_key(&id) {
                let mut leaves: Vec<usize> = used.iter().copied().collect();
                leaves.sort_unstable();
                self.stand_ins.hidden.insert(id, leaves);
                self.stand_in_nodes.push(kept);
            }
        }
    }

    /// The grad mode when capture starts: a step that begins inside `no_grad`.
    /// When a decorated function the user's line called turned it off
    /// (`model.generate(...)` under `@torch.no_grad()`), that call is known; a `with` block
    /// of the user's leaves no frame behind.
    pub fn grad_disabled_at_start<H: Host<Keeper = K, Kept = N>>(&mut self, h: &mut H) {
        let stack = h.stack(START_CALLERS + 1);
        if let Some(site) = stack.first().cloned() {
            let callee = h.callee().filter(|c| c.decorated);
            self.grad_off.push(GradOff {
                site,
                callee,
                callers: stack,
            });
        }
    }

    /// What a reentrant checkpoint recomputed in backward (`t`, one of its outputs, which
    /// backward is then run through): the loss depends on it, so the cuts it carries (made
    /// inside the recomputed layer, where the forward recorded nothing) are the loss's. Only
    /// its taint: it is no loss of its own (a layer returning its input returns a leaf). It is
    /// used (by that backward), not a module output left unused.
    pub fn recomputed<H: Host<Keeper = K, Kept = N>>(&mut self, h: &H, t: &H::Value) {
        self.used(h, t);
        if let Some((taint, keeper)) = self.taint.get(&h.addr(t)) {
            if h.holds(keeper, t) {
                let taint = taint.clone();
                union(&mut self.loss_taint, &taint);
            }
        }
    }

    /// Tensors among `v` (a tensor, or a tuple of them, or the first 64 items of a list).
    fn tensors<H: Host<Keeper = K, Kept = N>>(h: &H, v: &H::Value, out: &mut Vec<H::Value>) {
        if h.is_tensor(v) {
            out.push(v.clone());
        } else if let Some((_, items)) = h.items(v, usize::MAX, 64) {
            out.extend(items.into_iter().filter(|x| h.is_tensor(x)));
        }
    }

    /// Taint carried by Python values (floats from `.item()`, lists from `.tolist()`, arrays).
    fn value_taint<H: Host<Keeper = K, Kept = N>>(
        &self,
        h: &H,
        v: &H::Value,
        into: &mut Vec<u32>,
        depth: u32,
    ) {
        if let Some((t, keeper)) = self.values.get(&h.addr(v)) {
            if h.holds(keeper, v) {
                union(into, t);
            }
        }
        if depth > 2 {
            return;
        }
        if let Some((_, items)) = h.items(v, 4096, 4096) {
            for x in &items {
                self.value_taint(h, x, into, depth + 1);
            }
        }
    }

    fn mark_values<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &H,
        v: &H::Value,
        taint: &[u32],
        depth: u32,
    ) {
        let ptr = h.addr(v);
        let fresh = self.values.get(&ptr).is_none_or(|(_, k)| !h.holds(k, v));
        if fresh {
            self.values.insert(ptr, (Vec::new(), h.keep(v)));
        }
        if let Some((t, _)) = self.values.get_mut(&ptr) {
            union(t, taint);
        }
        if depth > 2 {
            return;
        }
        if let Some((SeqKind::List, items)) = h.items(v, 0, 4096) {
            for x in &items {
                self.mark_values(h, x, taint, depth + 1);
            }
        }
    }

    /// Records a cut whose inputs are `needs_grad` (their autograd nodes, or the leaves
    /// themselves); returns its id.
    #[allow(clippy::too_many_arguments)]
    fn push_cut<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &H,
        needs_grad: &[H::Value],
        kind: Category,
        op: &Arc<str>,
        site: Option<Site>,
        related: Vec<(Site, &'static str)>,
        soft: bool,
    ) -> Result<u32, H::Error> {
        let mut nodes = Vec::new();
        let mut leaves = Vec::new();
        for t in needs_grad {
            match h.grad_fn(t)? {
                None => leaves.push(h.addr(t)),
                Some(n) => nodes.push(n),
            }
        }
        let mut related = related;
        if let Some(via) = site.as_ref().and_then(|s| s.via.as_deref()) {
            // The cut ran inside a library the user's line called: that line is where the fix
            // belongs, the library's line is where it happened.
            related.push((via.clone(), INSIDE_LIBRARY));
        }
        let id = self.cuts.len() as u32;
        self.cuts.push(Cut {
            kind,
            op: op.clone(),
            site,
            related,
            inside: None,
            nodes,
            leaves,
            siblings: Vec::new(),
            outputs: Vec::new(),
            direct: Vec::new(),
            upstream: Vec::new(),
            soft,
        });
        Ok(id)
    }

    /// One op. An op the log cannot read counts in [`OpLog::errors`]; it never fails the
    /// user's call.
    pub fn op<H: Host<Keeper = K, Kept = N>>(&mut self, h: &mut H, mut call: Call<H::Value, N>) {
        let dropped = call.dropped.take();
        if self.record(h, &call, dropped).is_err() {
            self.errors += 1;
        }
    }

    fn record<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        call: &Call<H::Value, N>,
        dropped: Option<N>,
    ) -> Result<(), H::Error> {
        self.ops += 1;
        let FuncInfo {
            name,
            kind,
            mut inplace,
            product,
            receiver_only,
            alias,
            sets_data,
        } = self.func_info(h, &call.func);
        inplace |= call.inplace_kwarg;
        let first = call.args.first();
        let grads_only = self.grads_only;
        if kind == Kind::GradMode {
            let enabled = first.and_then(|a| h.truthy(a)).unwrap_or(true);
            if enabled {
                self.grad_off.pop();
            } else if let Some(site) = h.stack(1).into_iter().next() {
                let callee = h.callee();
                self.grad_off.push(GradOff {
                    site,
                    callee,
                    callers: Vec::new(),
                });
            }
            return Ok(());
        }
        if matches!(kind, Kind::GradRead | Kind::GradSet) {
            self.gradient_access(h, kind, call);
            return Ok(());
        }
        if (inplace || sets_data || alias) && !self.grads_of.is_empty() {
            // `p.grad.zero_()`, `p.grad.mul_(mask)`, `p.grad.data = ...`: the script writes a
            // gradient; `p.grad.data`, `p.grad.view(-1)`: a view of it, whose writes are its.
            let param = first.and_then(|g| match self.grads_of.get(&h.addr(g)) {
                Some((p, k)) if h.holds(k, g) => Some(*p),
                _ => None,
            });
            if let Some(param) = param {
                if alias {
                    self.grad_aliases(h, param, &call.out);
                } else {
                    self.grad_write(h, param, &name);
                }
            }
        }
        if grads_only {
            if inplace {
                // Between a backward and the next forward, what is written in place may still
                // be saved by a graph not yet backpropagated (a manual update of a parameter
                // before a second loss's backward).
                let mut site = None;
                self.push_inplace(h, first, &name, &mut site, None);
            }
            return Ok(());
        }
        let mut inputs: Vec<H::Value> = Vec::new();
        let given = if receiver_only {
            &call.args[..call.args.len().min(1)]
        } else {
            &call.args[..]
        };
        let kwargs = if receiver_only {
            &[][..]
        } else {
            &call.kwargs[..]
        };
        for a in given.iter().chain(kwargs) {
            Self::tensors(h, a, &mut inputs);
        }
        for t in &inputs {
            self.used(h, t);
        }
        let mut taint: Vec<u32> = Vec::new();
        // Cuts behind the inputs that are constants (need no grad) of a product.
        let mut constant: Vec<u32> = Vec::new();
        // Soft cuts whose very output is an input here.
        let mut direct: Vec<u32> = Vec::new();
        let mut needs_grad: Vec<H::Value> = Vec::new();
        for t in &inputs {
            let requires = h.requires_grad(t)?;
            if !requires {
                // A constructor the log sees says where the value came back itself.
                self.sighted(h, t, kind != Kind::Construct)?;
            }
            if let Some(at) = self.tainted(h, t) {
                let ts = &self.taint[&at].0;
                union(&mut taint, ts);
                if product && !requires {
                    union(&mut constant, ts);
                }
                for &c in ts {
                    if self.cuts[c as usize].outputs.contains(&at) && !has(&direct, &c) {
                        direct.push(c);
                    }
                }
            }
            if requires {
                needs_grad.push(t.clone());
            }
        }
        if let Some(used) = self.running.iter_mut().rev().find_map(Option::as_mut) {
            for t in &needs_grad {
                if used.len() < 100_000 && h.grad_fn(t)?.is_none() {
                    used.insert(h.addr(t));
                }
            }
        }
        for &c in &direct {
            for t in &needs_grad {
                let a = h.addr(t);
                let cut = &mut self.cuts[c as usize];
                if !cut.direct.contains(&a) && cut.direct.len() < 64 {
                    cut.direct.push(a);
                }
            }
        }
        // A value a non-differentiable op made constant, multiplied with values that need
        // grad (`q.long()` in `q @ k.T`): when it is all zero, so is their gradient. Their
        // nodes are kept for the cut (leaves are among its consumers below). Rare: only
        // after such a cut, and never more than a few nodes per cut.
        let sibling_cut = constant.iter().copied().find(|c| {
            self.cuts.get(*c as usize).is_some_and(|cut| {
                cut.kind == Category::NonDifferentiable && cut.siblings.len() < 16
            })
        });
        if let Some(c) = sibling_cut {
            for t in &needs_grad {
                if let Some(n) = h.grad_fn(t)? {
                    self.cuts[c as usize].siblings.push(n);
                }
            }
        }
        if !taint.is_empty() {
            // Parameters used directly by an op downstream of a cut: a round/argmax/integer
            // cast can leave them a constant input (`.long()` of small activations is all
            // zeros), and so an exactly zero gradient that the cut explains.
            for t in &needs_grad {
                let a = h.addr(t);
                for &c in &taint {
                    let v = self.consumers.entry(c).or_default();
                    if v.len() < 65_536 {
                        v.insert(a);
                    }
                }
            }
        }
        if kind == Kind::Construct {
            if let Some(data) = first {
                let mut back = Vec::new();
                self.value_taint(h, data, &mut back, 0);
                self.came_back.extend(back.iter().copied());
                union(&mut taint, &back);
            }
        } else if !self.values.is_empty() && kind != Kind::Ignore {
            // A float that left autograd, used as an op's scalar (`logits / temp` with
            // `temp = log_temp.exp().item()`): the output carries its cuts. Floats only: an
            // integer is a count or an index, and small ones are shared objects.
            for a in call.args.iter().chain(&call.kwargs) {
                if h.is_float(a) {
                    if let Some((t, keeper)) = self.values.get(&h.addr(a)) {
                        if h.holds(keeper, a) {
                            self.came_back.extend(t.iter().copied());
                            union(&mut taint, t);
                        }
                    }
                }
            }
        }
        let mut outputs: Vec<H::Value> = Vec::new();
        Self::tensors(h, &call.out, &mut outputs);
        if outputs.is_empty() && inplace {
            // `buf[i] = h` returns None: what it made is the tensor written into.
            if let Some(t) = first.filter(|t| h.is_tensor(t)) {
                outputs.push(t.clone());
            }
        }
        let mut out_needs_grad = false;
        for o in &outputs {
            // Inside `vmap` an output is a batched wrapper that says it needs no grad; the
            // tensor it wraps records the graph.
            let needs =
                h.requires_grad(o)? || wrapped(h, o).any(|u| h.requires_grad(&u).unwrap_or(false));
            out_needs_grad |= needs;
            if !needs && self.known.len() < 1_000_000 {
                self.known.insert(h.addr(o), h.keep(o));
            }
            // An in-place op (or one returning its input) makes nothing new: the op just used
            // that tensor.
            let a = h.addr(o);
            if !inputs.iter().any(|t| h.addr(t) == a) {
                self.made(a, needs);
            }
        }
        if needs_grad.is_empty()
            && !outputs.is_empty()
            && self.off_made.len() < 4096
            && !h.grad_enabled()?
        {
            // The block that turned recording off (`inference_mode` is no grad-mode op the
            // log sees: then the op's own line, inside the block).
            let block = match self.grad_off.last() {
                Some(b) => Some(b.site.clone()),
                None => h.stack(1).into_iter().next(),
            };
            if let Some(block) = block {
                for o in &outputs {
                    self.off_made.insert(h.addr(o), (block.clone(), h.keep(o)));
                }
            }
        }
        let mut site: Option<Option<Site>> = None;
        let value_exit = kind == Kind::ValueExit;
        let input_ptrs: FxHashSet<usize> = inputs.iter().map(|t| h.addr(t)).collect();
        // Every output a new tensor without history (read last: a node read per output).
        let new_leaves = |h: &H| {
            outputs.iter().all(|o| {
                !input_ptrs.contains(&h.addr(o)) && h.grad_fn(o).is_ok_and(|g| g.is_none())
            })
        };
        // A view made with recording off (`logits.reshape(...)` under `no_grad`) still says it
        // requires grad, but it has no history: backward stops at it as at a leaf.
        // (Not an in-place op on the input itself: `p.normal_()` under `no_grad` initialises.)
        let leaf_view = out_needs_grad
            && !inplace
            && !needs_grad.is_empty()
            && matches!(kind, Kind::Plain | Kind::Saturating | Kind::NonDiff)
            && !h.grad_enabled()?
            && new_leaves(h);
        // A tensor that needs grad copied into a new leaf that needs grad as well
        // (`torch.tensor(t, requires_grad=True)`, `nn.Parameter(t)`): the copy gets the
        // gradient, what it was made from none.
        let rewrapped_leaf =
            kind == Kind::Construct && out_needs_grad && !needs_grad.is_empty() && new_leaves(h);
        // Inside a custom Function's forward its backward decides the gradient (a reentrant
        // checkpoint over inputs that need none excepted: its output has no history).
        let inside_function = self.functions > 0 && self.checkpoint.is_empty();
        // `h.detach_()`: the tensor no longer needs grad once the op returns; the history it
        // had is what the cut stands behind.
        let dropped = dropped.filter(|_| kind == Kind::Detach);
        if kind != Kind::Ignore
            && !inside_function
            && (!needs_grad.is_empty() || dropped.is_some())
            && (value_exit
                || leaf_view
                || rewrapped_leaf
                || (!outputs.is_empty() && !out_needs_grad))
        {
            let grad_enabled = h.grad_enabled()?;
            let s = h.stack(1).into_iter().next();
            let mut related = Vec::new();
            let mut op = name.clone();
            let mut inside = None;
            let cut_kind = match kind {
                Kind::Detach => Category::Detach,
                Kind::Data => Category::DataAttr,
                Kind::ValueExit => Category::NumpyRoundtrip,
                Kind::Construct => Category::Rewrap,
                Kind::AutogradGrad => Category::CreateGraph,
                _ if !grad_enabled && !self.checkpoint.is_empty() => {
                    if let Some(s) = self.checkpoint.last() {
                        related.push((s.clone(), CHECKPOINTED));
                    }
                    op = Arc::from(CHECKPOINT_OP);
                    Category::NoGrad
                }
                _ if !grad_enabled => {
                    // Turned off inside the call this op runs in, made at the op's own line
                    // (`Normal(mu, std).sample()`), with recording on before it: the block is
                    // the library's.
                    if let [GradOff {
                        site: off,
                        callee: Some(c),
                        ..
                    }] = self.grad_off.as_slice()
                    {
                        let same_line = s
                            .as_ref()
                            .is_some_and(|s| s.file == off.file && s.line == off.line);
                        if same_line && h.callee().is_some_and(|now| now.id == c.id) {
                            inside = Some(c.name.clone());
                        }
                    }
                    match (self.grad_off.last(), &self.inference_block) {
                        (Some(b), _) => {
                            related.push((b.site.clone(), "gradient recording disabled here"))
                        }
                        // Off with no grad-mode op seen: an `inference_mode` block.
                        (None, Some(s)) => related.push((
                            s.clone(),
                            "gradient recording disabled here (`inference_mode`)",
                        )),
                        _ => {}
                    }
                    // The callers too: the `with` block or decorator may be a few calls up; when
                    // recording was off before capture began, the calls above where it began.
                    let callers = h.stack(4).into_iter().skip(1).collect::<Vec<_>>();
                    let start_callers = self.grad_off.last().map_or(&[][..], |b| &b.callers[..]);
                    let new = start_callers
                        .iter()
                        .filter(|s| !callers.iter().any(|c| c.file == s.file && c.line == s.line))
                        .cloned()
                        .collect::<Vec<_>>();
                    for s in callers.into_iter().chain(new) {
                        related.push((s, "called from here"));
                    }
                    Category::NoGrad
                }
                // argmax-like ops, integer/bool casts, comparisons, and any other op whose
                // output does not need grad while its input does.
                _ => {
                    // A draw (`torch.multinomial`) made inside the call at the user's line
                    // (`dist.sample()`): that call is what the user wrote.
                    let last = name.rsplit('.').next().unwrap_or(&name);
                    if SAMPLERS.contains(&last) {
                        inside = h.callee().map(|c| c.name);
                    }
                    Category::NonDifferentiable
                }
            };
            site = Some(s.clone());
            let id = self.push_cut(h, &needs_grad, cut_kind, &op, s, related, false)?;
            self.cuts[id as usize].inside = inside;
            if taint.len() <= MAX_UPSTREAM {
                self.cuts[id as usize].upstream = taint.clone();
            }
            if let Some(n) = dropped {
                self.cuts[id as usize].nodes.push(n);
            }
            taint.push(id);
        } else if matches!(kind, Kind::NonDiff | Kind::Saturating)
            && out_needs_grad
            && !needs_grad.is_empty()
            && taint.len() < 32
        {
            // round/floor/sign keep a grad_fn whose gradient is zero everywhere; clamp/where
            // where they saturate or mask everything. Candidates for zero gradients only.
            let soft_kind = if kind == Kind::NonDiff {
                Category::NonDifferentiable
            } else {
                Category::DeadPath
            };
            let s = h.stack(1).into_iter().next();
            site = Some(s.clone());
            let id = self.push_cut(h, &needs_grad, soft_kind, &name, s, Vec::new(), true)?;
            self.cuts[id as usize].outputs = outputs.iter().map(|o| h.addr(o)).collect();
            taint.push(id);
        }
        // Some outputs need grad and others do not (`x.max(dim)`'s indices, `topk`/`sort`'s,
        // `unique`'s inverse): those others are indices, cut from the inputs' history, and
        // what is computed from them alone carries this cut.
        let mut index_cut: Option<(u32, FxHashSet<usize>)> = None;
        if out_needs_grad
            && outputs.len() > 1
            && !inplace
            && !needs_grad.is_empty()
            && !inside_function
            && matches!(kind, Kind::Plain | Kind::NonDiff | Kind::Saturating)
            && h.grad_enabled()?
        {
            let mut indices = FxHashSet::default();
            for o in &outputs {
                if !input_ptrs.contains(&h.addr(o)) && !h.requires_grad(o)? {
                    indices.insert(h.addr(o));
                }
            }
            if !indices.is_empty() {
                let s = match &site {
                    Some(s) => s.clone(),
                    None => {
                        let s = h.stack(1).into_iter().next();
                        site = Some(s.clone());
                        s
                    }
                };
                let op: Arc<str> = Arc::from(format!("{name}{INDICES_SUFFIX}"));
                let id = self.push_cut(
                    h,
                    &needs_grad,
                    Category::NonDifferentiable,
                    &op,
                    s,
                    Vec::new(),
                    false,
                )?;
                index_cut = Some((id, indices));
            }
        }
        if value_exit && !taint.is_empty() {
            if needs_grad.is_empty() {
                // `.detach()` (or `.data`) only to be allowed to call `.numpy()` / `.tolist()`:
                // the value leaving autograd is the cause, the detach its means.
                let exit = h.stack(1).into_iter().next();
                for &c in &taint {
                    if let Some(cut) = self.cuts.get_mut(c as usize) {
                        if matches!(cut.kind, Category::Detach | Category::DataAttr) && !cut.soft {
                            self.exit_relabels.push((
                                c,
                                cut.kind,
                                cut.op.clone(),
                                cut.related.len(),
                            ));
                            cut.kind = Category::NumpyRoundtrip;
                            cut.op = name.clone();
                            if let Some(e) = exit.clone() {
                                if cut.site.as_ref().map(|s| (&s.file, s.line))
                                    != Some((&e.file, e.line))
                                {
                                    cut.related.push((e, "the value leaves autograd here"));
                                }
                            }
                        }
                    }
                }
            }
            // Values leaving autograd carry what they depend on into Python.
            self.mark_values(h, &call.out, &taint, 0);
            let whole = [".tolist", ".numpy", ".__array__"]
                .iter()
                .any(|e| name.ends_with(e));
            let count = match first.filter(|t| whole && h.is_tensor(t)) {
                Some(t) => h.numel(t),
                None => 1,
            };
            if self.exits.len() < 4096 {
                self.exits.push((taint.clone(), count));
            }
        }
        if kind == Kind::Construct && !taint.is_empty() {
            // Numbers an op the log sees took back are not waiting for an unseen one.
            self.exits
                .retain(|(ids, _)| !ids.iter().all(|i| taint.contains(i)));
        }
        if kind == Kind::Ignore {
            taint.clear();
        }
        let site_now = |h: &mut H, site: &mut Option<Option<Site>>| -> Option<Site> {
            if site.is_none() {
                *site = Some(h.stack(1).into_iter().next());
            }
            site.clone().flatten()
        };
        if kind == Kind::Construct && !taint.is_empty() {
            // A value that left the graph came back: where it came back is part of the chain.
            if let Some(s) = site_now(h, &mut site) {
                for &c in &taint {
                    if let Some(cut) = self.cuts.get_mut(c as usize) {
                        if cut.kind == Category::NumpyRoundtrip
                            && !cut.related.iter().any(|(_, m)| *m == COMES_BACK)
                        {
                            cut.related.push((s.clone(), COMES_BACK));
                        }
                    }
                }
            }
        }
        let merges = name.ends_with(FUNCTION_APPLY_SUFFIX);
        for o in &outputs {
            let ptr = h.addr(o);
            let index = index_cut
                .as_ref()
                .filter(|(_, outs)| outs.contains(&ptr))
                .map(|(id, _)| *id);
            if let Some(id) = index {
                let mut t = taint.clone();
                t.push(id);
                self.taint.insert(ptr, (t, h.keep(o)));
            } else if merges {
                // A custom Function's call, after the ops of its forward: what those gave its
                // outputs (a cut inside a checkpointed forward) stays.
                let mut t = taint.clone();
                if let Some((had, k)) = self.taint.get(&ptr) {
                    if h.holds(k, o) {
                        t.extend(had.iter().copied().filter(|i| !taint.contains(i)));
                    }
                }
                if !t.is_empty() {
                    self.taint.insert(ptr, (t, h.keep(o)));
                }
            } else if taint.is_empty() {
                self.taint.remove(&ptr);
            } else {
                self.taint.insert(ptr, (taint.clone(), h.keep(o)));
                // What a function transform hands back out of this wrapped output.
                for u in wrapped(h, o) {
                    self.taint.insert(h.addr(&u), (taint.clone(), h.keep(&u)));
                }
            }
            if !input_ptrs.contains(&ptr) {
                // A new tensor at this address: forget what the address meant before.
                self.consumed.remove(&ptr);
                self.requires_grad_set.remove(&ptr);
                self.construct_site.remove(&ptr);
                if out_needs_grad || kind == Kind::Construct {
                    if let Some(s) = site_now(h, &mut site) {
                        if out_needs_grad {
                            self.created.insert(ptr, s.clone());
                        }
                        if kind == Kind::Construct {
                            self.construct_site.insert(ptr, (s, taint.clone()));
                        }
                    }
                }
            }
        }
        if kind == Kind::RequiresGrad {
            if let Some(t) = first {
                if let Some(s) = site_now(h, &mut site) {
                    self.requires_grad_set.insert(h.addr(t), s);
                }
            }
        }
        if out_needs_grad && self.read.len() < 4_000_000 {
            for t in &needs_grad {
                self.read.insert(h.addr(t));
            }
        }
        if !needs_grad.is_empty() {
            // Where each input was first used by an op that records a graph: autograd may save
            // any of them (an input batch is saved for the weight's gradient), so an in-place
            // op on it later is matched to this use.
            let mut s = None;
            let used = if out_needs_grad { &inputs } else { &needs_grad };
            for t in used {
                let ptr = h.addr(t);
                if let std::collections::hash_map::Entry::Vacant(e) = self.consumed.entry(ptr) {
                    if s.is_none() {
                        s = site_now(h, &mut site);
                    }
                    if let Some(s) = &s {
                        e.insert(s.clone());
                    }
                }
            }
        }
        if inplace {
            self.push_inplace(h, first, &name, &mut site, None);
        }
        Ok(())
    }

    /// An in-place op `name` wrote `target` (the op's first argument, when a tensor; `param`:
    /// the parameter an optimizer's step wrote): kept for an autograd error a later backward
    /// may raise. `site`: the op's, read once.
    fn push_inplace<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        target: Option<&H::Value>,
        name: &Arc<str>,
        site: &mut Option<Option<Site>>,
        param: Option<u64>,
    ) {
        let Some(target) = target.filter(|t| h.is_tensor(t)) else {
            return;
        };
        if self.inplace.len() >= 65_536 {
            return;
        }
        let ptr = h.addr(target);
        let t = h.inplace_target(target);
        if site.is_none() {
            *site = Some(h.stack(1).into_iter().next());
        }
        self.inplace.push(Inplace {
            op: name.clone(),
            site: site.clone().flatten(),
            version: t.version,
            prev_node: t.prev_node,
            node: t.node,
            shape: t.shape,
            created: self.created.get(&ptr).cloned(),
            consumed: self.consumed.get(&ptr).cloned(),
            param,
        });
    }

    /// `p.grad` read or assigned. After a backward: the gradient tensor a read returns is
    /// remembered as `p`'s, and an assignment is a write to `p`'s gradient.
    fn gradient_access<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        kind: Kind,
        call: &Call<H::Value, N>,
    ) {
        let Some(p) = call.args.first() else { return };
        let param = h.addr(p);
        if kind == Kind::GradSet {
            if self.backward_seen {
                self.grad_write(h, param, &Arc::from("Tensor.grad"));
            }
            return;
        }
        let g = &call.out;
        if h.is_tensor(g) {
            if self.known.len() < 1_000_000 {
                self.known.insert(h.addr(g), h.keep(g));
            }
            if self.backward_seen && self.grads_of.len() < 65_536 {
                self.grads_of.insert(h.addr(g), (param, h.keep(g)));
            }
        }
    }

    /// `out` (a tensor, or the tuple `split`/`unbind` return) views `param`'s gradient.
    fn grad_aliases<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        param: usize,
        out: &H::Value,
    ) {
        let mut views: Vec<H::Value> = Vec::new();
        Self::tensors(h, out, &mut views);
        for v in views {
            if self.grads_of.len() < 65_536 {
                self.grads_of.insert(h.addr(&v), (param, h.keep(&v)));
            }
        }
    }

    /// The script wrote `param`'s gradient (after a backward, before the step), itself or
    /// through a function it called (`nn.init.zeros_(p.grad)`): the write is told at the
    /// script's line, as the function's. A call with its own check (`optimizer.zero_grad()`
    /// there is GS108) claims its parameters first.
    fn grad_write<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        param: usize,
        op: &Arc<str>,
    ) {
        if self.grad_writes.len() < 65_536 && !self.stepped.contains(&param) {
            let op = match h.callee() {
                Some(c) => Arc::from(c.name.as_str()),
                None => op.clone(),
            };
            if let Some(site) = h.stack(1).into_iter().next() {
                self.grad_writes.push((param, Some(site), op));
            }
        }
    }

    /// `t`, an input needing no grad: the first time it is seen, it may be a tensor rebuilt
    /// from numbers that left autograd ([`OpLog::rebuilt`]).
    fn sighted<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        t: &H::Value,
        tell: bool,
    ) -> Result<(), H::Error> {
        let a = h.addr(t);
        if self.exits.is_empty() {
            // Nothing waits for a way back: only remember it (a stale entry at a reused
            // address is told apart by its keeper when it matters).
            if self.known.len() < 1_000_000 && !self.known.contains_key(&a) {
                self.known.insert(a, h.keep(t));
            }
            return Ok(());
        }
        if self.known.get(&a).is_some_and(|k| h.holds(k, t)) {
            return Ok(());
        }
        self.rebuilt(h, t, tell)?;
        if self.known.len() < 1_000_000 {
            self.known.insert(a, h.keep(t));
        }
        Ok(())
    }

    /// `t`, seen for the first time as an op's input while numbers that left autograd wait
    /// for a way back: when it holds exactly as many numbers as the latest of those exits
    /// together (`torch.Tensor([float(s) for s in scores])`, `torch.FloatTensor(h.tolist())`:
    /// constructors that are no torch function), it was rebuilt from them and carries their
    /// cuts.
    fn rebuilt<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        t: &H::Value,
        tell: bool,
    ) -> Result<(), H::Error> {
        if self.tainted(h, t).is_some() {
            return Ok(());
        }
        let numel = h.numel(t);
        let mut sum = 0;
        let mut from = None;
        for (i, (_, n)) in self.exits.iter().enumerate().rev() {
            sum += n;
            if sum == numel {
                from = Some(i);
                break;
            }
            if sum > numel {
                break;
            }
        }
        let Some(i) = from else { return Ok(()) };
        let mut ids = Vec::new();
        for (t, _) in self.exits.drain(i..) {
            union(&mut ids, &t);
        }
        if let Some(site) = h.stack(1).into_iter().next().filter(|_| tell) {
            for &c in &ids {
                if let Some(cut) = self.cuts.get_mut(c as usize) {
                    // On the exit's own line (`torch.Tensor(h.tolist())`) it says nothing more.
                    let same_line = cut
                        .site
                        .as_ref()
                        .is_some_and(|s| s.file == site.file && s.line == site.line);
                    if cut.kind == Category::NumpyRoundtrip
                        && !same_line
                        && !cut.related.iter().any(|(_, m)| *m == REBUILT)
                    {
                        cut.related.push((site.clone(), REBUILT));
                    }
                }
            }
        }
        self.came_back.extend(ids.iter().copied());
        self.taint.insert(h.addr(t), (ids, h.keep(t)));
        Ok(())
    }

    /// The address of the taint entry `t` carries: its own, else (once a cut exists) that of
    /// the tensor a function transform wrapped into it (`vmap` over a detached tensor).
    fn tainted<H: Host<Keeper = K, Kept = N>>(&self, h: &H, t: &H::Value) -> Option<usize> {
        let a = h.addr(t);
        if self.taint.get(&a).is_some_and(|(_, k)| h.holds(k, t)) {
            return Some(a);
        }
        if self.cuts.is_empty() {
            return None;
        }
        wrapped(h, t).find_map(|u| {
            let b = h.addr(&u);
            self.taint
                .get(&b)
                .is_some_and(|(_, k)| h.holds(k, &u))
                .then_some(b)
        })
    }

    /// A backward starts from `loss`: remember which cuts it depends on.
    pub fn loss<H: Host<Keeper = K, Kept = N>>(&mut self, h: &mut H, loss: &H::Value) {
        self.backward_seen = true;
        self.stepped.clear();
        let ptr = h.addr(loss);
        let mut taint = match self.taint.get(&ptr) {
            Some((t, keeper)) if h.holds(keeper, loss) => t.clone(),
            _ => Vec::new(),
        };
        let is_leaf = h.grad_fn(loss).map(|g| g.is_none()).unwrap_or(false);
        let requires = h.requires_grad(loss).unwrap_or(false);
        if is_leaf && requires {
            // A leaf loss: made with requires_grad=True (or requires_grad_()) from values
            // that had left the graph. Nothing upstream of it can learn.
            let site = self
                .requires_grad_set
                .get(&ptr)
                .cloned()
                .or_else(|| self.construct_site.get(&ptr).map(|(s, _)| s.clone()))
                .or_else(|| self.created.get(&ptr).cloned());
            if let Some((_, t)) = self.construct_site.get(&ptr) {
                union(&mut taint, t);
            }
            self.loss_rewraps.push((site, taint.clone()));
        } else if let Some((site, t)) = self.leaf_loss_behind(h, loss) {
            // The same leaf, with a framework's arithmetic after it: Lightning backpropagates
            // `loss / accumulate_grad_batches` of the loss `training_step` returned.
            union(&mut taint, &t);
            self.loss_rewraps.push((Some(site), t));
        }
        union(&mut self.loss_taint, &taint);
    }

    /// A tensor the user's code constructed from values that had left autograd (`.item()`,
    /// `.tolist()`, NumPy) that is the only leaf behind `loss`, a few nodes up: the leaf loss
    /// of [`loss`](Self::loss) under arithmetic code added after it. Its site and taint.
    /// A leaf made otherwise (`x.detach().requires_grad_()` of an adversarial example, an
    /// image optimised in place of weights) is a deliberate input, never this.
    fn leaf_loss_behind<H: Host<Keeper = K, Kept = N>>(
        &self,
        h: &mut H,
        loss: &H::Value,
    ) -> Option<(Site, Vec<u32>)> {
        /// Nodes looked at: a framework's arithmetic is a node or two.
        const NODES: usize = 16;
        let node = h.node(&h.grad_fn(loss).ok()??);
        let w = walk_graph(h, vec![node], NODES).ok()?;
        let [leaf] = w.leaves.as_slice() else {
            return None;
        };
        if w.truncated {
            return None;
        }
        let (site, taint) = self.construct_site.get(&(*leaf as usize))?;
        let exits = taint.iter().any(|id| {
            self.cuts
                .get(*id as usize)
                .is_some_and(|c| c.kind == Category::NumpyRoundtrip)
        });
        exits.then(|| (site.clone(), taint.clone()))
    }

    /// Snapshot of the autograd graph behind `loss` into the capture (at most `budget` nodes):
    /// node types, the module that made each node (inherited from its consumer inside
    /// composite ops), the parameter key of each leaf (`keys`: leaf address -> key).
    pub fn graph<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        recorder: &mut Recorder,
        loss: &H::Value,
        keys: &FxHashMap<usize, u64>,
        budget: usize,
    ) -> Result<(), H::Error> {
        if recorder.capture.graph.is_some() {
            return Ok(());
        }
        let Ok(Some(root)) = h.grad_fn(loss) else {
            return Ok(());
        };
        let root = h.node(&root);
        let mut index: FxHashMap<usize, u32> = FxHashMap::default();
        let mut rec = GraphRec::default();
        // Custom Functions' nodes, by the sequence number each took.
        let function_at: FxHashMap<u64, usize> = self
            .function_calls
            .iter()
            .enumerate()
            .map(|(i, c)| (c.seq, i))
            .collect();
        // Depth-first, each node with its depth: no deeper than `MAX_DEPTH` (see there:
        // freeing nodes Python has read recurses in torch).
        let mut stack: Vec<(H::Node, Option<u64>, usize)> = vec![(root, None, 0)];
        let mut children = Vec::new();
        // Every node read is held until both passes are done: identities are addresses of
        // handles, which a dead handle's successor may reuse (see `gradsleuth_graph`).
        let mut held: Vec<H::Node> = Vec::new();
        while let Some((node, inherited, depth)) = stack.pop() {
            let id = h.id(&node);
            if index.contains_key(&id) {
                continue;
            }
            if rec.nodes.len() >= budget {
                rec.truncated = true;
                break;
            }
            let seq = h.node_sequence_nr(&node);
            let module = seq.and_then(|seq| self.module_at(seq)).or(inherited);
            let param = h
                .leaf(&node)?
                .and_then(|addr| keys.get(&(addr as usize)).copied());
            let name = h.node_name(&node);
            let i = rec.nodes.len() as u32;
            if let Some(&call) = seq.and_then(|seq| function_at.get(&seq)) {
                if name.starts_with(&*self.function_calls[call].name) {
                    self.function_nodes.push((i, call));
                }
            }
            index.insert(id, i);
            held.push(node.clone());
            rec.nodes.push(GraphNode {
                name,
                module,
                param,
            });
            if depth == gradsleuth_graph::MAX_DEPTH {
                rec.truncated = true;
                continue;
            }
            children.clear();
            h.children(&node, &mut children)?;
            for c in children.drain(..) {
                stack.push((c, module, depth + 1));
            }
        }
        // Edges, now that every node has an index (a second, cheap pass over the same nodes).
        let mut edges = Vec::new();
        let Ok(Some(root)) = h.grad_fn(loss) else {
            return Ok(());
        };
        let mut stack = vec![h.node(&root)];
        let mut seen: FxHashSet<usize> = FxHashSet::default();
        while let Some(node) = stack.pop() {
            let id = h.id(&node);
            let Some(&from) = index.get(&id) else {
                continue;
            };
            if !seen.insert(id) {
                continue;
            }
            children.clear();
            h.children(&node, &mut children)?;
            for c in children.drain(..) {
                if let Some(&to) = index.get(&h.id(&c)) {
                    edges.push((from, to));
                    stack.push(c);
                }
            }
            held.push(node);
        }
        rec.edges = edges;
        recorder.capture.graph = Some(rec);
        Ok(())
    }

    /// Parameters in `pool` (address -> key) that the cut's inputs depend on, and the address
    /// of the first one found, one not in `later` when there is one.
    fn reach<H: Host<Keeper = K, Kept = N>>(
        h: &mut H,
        cut: &Cut<N>,
        pool: &FxHashMap<usize, u64>,
        later: &FxHashMap<usize, u64>,
        stand_ins: &StandInMap,
    ) -> (Vec<u64>, Option<u64>) {
        let roots: Vec<H::Node> = cut.nodes.iter().map(|n| h.node(n)).collect();
        let mut leaves: Vec<u64> = cut.leaves.iter().map(|p| *p as u64).collect();
        leaves.extend(leaves_behind(h, stand_ins, roots));
        let mut params = Vec::new();
        let (mut first, mut fallback) = (None, None);
        for l in leaves {
            if let Some(k) = pool.get(&(l as usize)) {
                if !params.contains(k) {
                    params.push(*k);
                    if later.contains_key(&(l as usize)) {
                        fallback.get_or_insert(l);
                    } else {
                        first.get_or_insert(l);
                    }
                }
            }
        }
        (params, first.or(fallback))
    }

    /// A detach told as the means of an exit to Python (see `exit_relabels`) whose tensor
    /// the loss depends on while none of its values came back: the detach is the cut.
    fn settle_exits(&mut self) {
        for (id, kind, op, related) in std::mem::take(&mut self.exit_relabels) {
            if self.came_back.contains(&id) || !has(&self.loss_taint, &id) {
                continue;
            }
            if let Some(cut) = self.cuts.get_mut(id as usize) {
                cut.kind = kind;
                cut.op = op;
                cut.related.truncate(related);
            }
        }
    }

    /// Attributes parameters the backward did not reach (`unreached`: address -> key) and
    /// those whose gradient was exactly zero (`zero`) to the cuts the loss depends on, and
    /// writes them into the capture. A parameter behind several cuts is named by each (all
    /// must change). Releases every kept object.
    pub fn resolve<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        recorder: &mut Recorder,
        unreached: &FxHashMap<usize, u64>,
        zero: &FxHashMap<usize, u64>,
        cleared: &FxHashMap<usize, u64>,
    ) {
        self.settle_exits();
        self.refused_unseen(recorder);
        let mut order: Vec<u32> = self.loss_taint.clone();
        order.sort_unstable();
        // `.item()` exits that only feed a re-made leaf loss are told by the loss_rewrap
        // finding.
        let rewrap_exits: FxHashSet<u32> = self
            .loss_rewraps
            .iter()
            .flat_map(|(_, t)| t.iter().copied())
            .filter(|id| {
                self.cuts
                    .get(*id as usize)
                    .is_some_and(|c| c.kind == Category::NumpyRoundtrip)
            })
            .collect();
        // A gradient the script itself wrote between backward and the step (`p.grad.zero_()`)
        // is zero at the step whatever backward gave it: that zero is the write's evidence
        // (told below), not a cut's in the graph.
        let written: FxHashSet<usize> = self.grad_writes.iter().map(|(p, _, _)| *p).collect();
        let zero_unwritten: FxHashMap<usize, u64> = zero
            .iter()
            .filter(|(a, _)| !written.contains(a))
            .map(|(a, k)| (*a, *k))
            .collect();
        // A hard cut (detach, no_grad, a rebuilt tensor) also explains a parameter backward
        // reached with an exactly zero gradient when that parameter feeds the cut: the path
        // through the cut was the one that made the loss depend on it, and what is left
        // carries nothing (a class token that attention mixed into the pooled tokens, whose
        // own row a residual carries to a pooling that skips it).
        let hard_pool: FxHashMap<usize, u64> = unreached
            .iter()
            .chain(zero_unwritten.iter())
            .map(|(a, k)| (*a, *k))
            .collect();
        let unreached_keys: FxHashSet<u64> = unreached.values().copied().collect();
        let none = FxHashMap::default();
        let mut out: Vec<CutRec> = Vec::new();
        let mut out_ids: Vec<u32> = Vec::new();
        for id in order {
            let Some(cut) = self.cuts.get(id as usize) else {
                continue;
            };
            if rewrap_exits.contains(&id) {
                continue;
            }
            // Not a derivative taken without `create_graph`: the loss still depends on the
            // parameters through its other terms, and an exactly zero gradient there is theirs
            // (a critic's last bias cancels in `critic(fake).mean() - critic(real).mean()`).
            let pool = if cut.soft
                && matches!(cut.kind, Category::DeadPath | Category::NonDifferentiable)
            {
                &zero_unwritten
            } else if cut.soft {
                zero
            } else if cut.kind == Category::CreateGraph {
                unreached
            } else {
                &hard_pool
            };
            // A hard cut's chain starts from a parameter the backward never reached, when there
            // is one: the plainest evidence of the cut.
            let later = if cut.soft { &none } else { zero };
            let (mut params, first_leaf) = Self::reach(h, cut, pool, later, &self.stand_ins);
            // Zero gradients are a hard cut's only when it also leaves a parameter unreached:
            // then it took a path that was the only one for something. A cut behind which
            // every parameter is still reached (a detector's proposals, detached by design,
            // while its objectness loss trains the same layers) explains no zero: that zero
            // is the loss's (no anchor of that level sampled this step).
            let on_hard_pool = !cut.soft && cut.kind != Category::CreateGraph;
            if on_hard_pool && !params.iter().any(|k| unreached_keys.contains(k)) {
                params.clear();
            }
            // Downstream of a non-differentiable op: parameters whose input it made constant
            // (their gradient exactly zero) are lost to it too.
            if cut.kind == Category::NonDifferentiable {
                let consumers: Vec<usize> = self
                    .consumers
                    .get(&id)
                    .into_iter()
                    .flatten()
                    .copied()
                    .collect();
                // A parameter used directly on a rounded value (`round(y) * scale`) gets
                // `round(y)` as its gradient: reached by no gradient at all, it was lost with
                // the derivative the loss is made of (`autograd.grad(energy, x,
                // create_graph=True)`: rounding makes it constant).
                if cut.soft {
                    for a in &cut.direct {
                        if let Some(k) = unreached.get(a) {
                            if !params.contains(k) {
                                params.push(*k);
                            }
                        }
                    }
                }
                let mut lost: Vec<u64> = consumers.iter().map(|a| *a as u64).collect();
                // And those behind a value multiplied with its (zero) output.
                if !cut.siblings.is_empty() {
                    let roots: Vec<H::Node> = cut.siblings.iter().map(|n| h.node(n)).collect();
                    lost.extend(leaves_behind(&mut *h, &self.stand_ins, roots));
                }
                for a in lost {
                    if let Some(k) = zero.get(&(a as usize)) {
                        if !params.contains(k) {
                            params.push(*k);
                        }
                    }
                }
            }
            // A gradient term without create_graph adds nothing to the gradient even when
            // every parameter still learns through the rest of the loss.
            if params.is_empty()
                && cut.kind != Category::CreateGraph
                && &*cut.op != gradsleuth_model::capture::INFERENCE_DATA_OP
            {
                continue;
            }
            // Names are final only at the end of the run: the analysis puts the parameter
            // first.
            let mut chain = Vec::new();
            let mut chain_from = None;
            if let (Some(leaf), Some(root)) = (first_leaf, cut.nodes.first()) {
                let root = h.node(root);
                let names = |g: &mut StandIns<'_, H>, n: &H::Node| g.h.node_name(n);
                let mut g = StandIns {
                    h: &mut *h,
                    map: &self.stand_ins,
                };
                if let Ok(Some(path)) = path_to_leaf(&mut g, root, leaf, 100_000, names) {
                    chain.extend(path.into_iter().rev().skip(1).take(12));
                    chain_from = pool.get(&(leaf as usize)).copied();
                }
            }
            let here = cut
                .site
                .as_ref()
                .map(|s| format!(" at {}:{}", short(&s.file), s.line))
                .unwrap_or_default();
            chain.push(format!("✂ {}{here}", cut.op));
            chain.push("loss".into());
            let location = cut.site.as_ref().and_then(|s| recorder.site_location(s));
            let related = related_of(recorder, &cut.related);
            out_ids.push(id);
            out.push(CutRec {
                kind: cut.kind,
                op: cut.op.to_string(),
                location,
                related,
                params,
                chain,
                chain_from,
                step: self.step,
                within: cut.inside.clone().map(Within::Call),
            });
        }
        // Cuts in series: one whose output flowed into a later hard cut that already names
        // every parameter it would (a detector's proposals, detached by design, upstream of a
        // total loss detached by mistake) says nothing the later one does not, and may be
        // deliberate: the later cut is what the run shows. Cuts side by side are all told.
        let upstream_of = |a: u32, b: u32| {
            self.cuts
                .get(b as usize)
                .is_some_and(|c| !c.soft && has(&c.upstream, &a))
        };
        let keep: Vec<bool> = (0..out.len())
            .map(|i| {
                !(0..out.len()).any(|j| {
                    i != j
                        && upstream_of(out_ids[i], out_ids[j])
                        && out[i].params.iter().all(|k| out[j].params.contains(k))
                })
            })
            .collect();
        let mut kept = keep.into_iter();
        out.retain(|_| kept.next().unwrap_or(true));
        // Values that left autograd for NumPy or Python (`.numpy()`, `.tolist()`, `.item()`)
        // and came back through arithmetic the op log cannot see (`(a - a.mean()) / a.std()`
        // in NumPy) carry no taint to the loss; for parameters nothing else explains, such an
        // exit upstream of them is the cause.
        if self.loss_rewraps.is_empty() {
            let mut left: FxHashMap<usize, u64> = unreached.clone();
            for c in &out {
                left.retain(|_, k| !c.params.contains(k));
            }
            for (id, cut) in self.cuts.iter().enumerate() {
                if left.is_empty() {
                    break;
                }
                // Only NumPy exits (`.numpy()`, or NumPy reading the tensor itself through
                // `__array__`): Python scalars and lists are followed value by value.
                if cut.soft
                    || cut.kind != Category::NumpyRoundtrip
                    || !(cut.op.ends_with("numpy") || cut.op.ends_with("__array__"))
                    || order_has(&self.loss_taint, id)
                {
                    continue;
                }
                let (params, _) = Self::reach(h, cut, &left, &none, &self.stand_ins);
                if params.is_empty() {
                    continue;
                }
                left.retain(|_, k| !params.contains(k));
                let here = cut
                    .site
                    .as_ref()
                    .map(|s| format!(" at {}:{}", short(&s.file), s.line))
                    .unwrap_or_default();
                out.push(CutRec {
                    kind: cut.kind,
                    op: cut.op.to_string(),
                    location: cut.site.as_ref().and_then(|s| recorder.site_location(s)),
                    related: related_of(recorder, &cut.related),
                    params,
                    chain: vec![
                        format!("✂ {}{here}", cut.op),
                        "(NumPy / Python)".into(),
                        "loss".into(),
                    ],
                    chain_from: None,
                    step: self.step,
                    within: None,
                });
            }
        }
        // A leaf loss: nothing upstream of it can learn, whatever path the values took.
        for (site, taint) in &self.loss_rewraps {
            let mut params: Vec<u64> = unreached.values().copied().collect();
            params.sort_unstable();
            let mut related = Vec::new();
            // Where the value left autograd: the exits it carries, else any cut reaching them.
            let mut exits: Vec<&Cut<N>> = taint
                .iter()
                .filter_map(|id| self.cuts.get(*id as usize))
                .filter(|c| !c.soft)
                .collect();
            if exits.is_empty() {
                exits = self
                    .cuts
                    .iter()
                    .filter(|c| !c.soft)
                    .filter(|c| {
                        !Self::reach(h, c, unreached, &none, &self.stand_ins)
                            .0
                            .is_empty()
                    })
                    .take(1)
                    .collect();
            }
            for c in exits {
                if let Some(l) = c.site.as_ref().and_then(|s| recorder.site_location(s)) {
                    related.push(Related {
                        location: l,
                        message: format!("`{}` takes the value out of autograd", c.op),
                    });
                }
            }
            out.push(CutRec {
                kind: Category::LossRewrap,
                op: "requires_grad=True".into(),
                location: site.as_ref().and_then(|s| recorder.site_location(s)),
                related,
                params,
                chain: vec![
                    "the loss's value is copied into a new leaf tensor".into(),
                    "✂ backward starts at the copy".into(),
                ],
                chain_from: None,
                step: self.step,
                within: None,
            });
        }
        let found = self.function_backward_cuts(recorder, unreached, &out);
        for (call, mut params, path) in found {
            let call = &self.function_calls[call];
            params.sort_unstable();
            params.dedup();
            let here = call
                .site
                .as_ref()
                .map(|s| format!(" at {}:{}", short(&s.file), s.line))
                .unwrap_or_default();
            let mut chain = path;
            chain.push(format!(
                "✂ {}Backward{here} (returns no gradient for it)",
                call.name
            ));
            chain.push("loss".into());
            out.push(CutRec {
                kind: Category::NonDifferentiable,
                op: format!("{}.backward", call.name),
                location: call.site.as_ref().and_then(|s| recorder.site_location(s)),
                related: Vec::new(),
                params,
                chain,
                chain_from: None,
                step: self.step,
                within: Some(Within::FunctionBackward(call.name.to_string())),
            });
        }
        // The script's own writes to gradients between backward and the step (`p.grad =
        // None`, `p.grad.zero_()`): for parameters whose gradient is gone (`cleared`) or
        // exactly zero at the step, and that no cut explains, the write is why.
        let mut writes: Vec<(Option<Site>, Arc<str>, Vec<u64>)> = Vec::new();
        for (param, site, op) in &self.grad_writes {
            let Some(k) = cleared.get(param).or_else(|| zero.get(param)) else {
                continue;
            };
            if out.iter().any(|c| c.params.contains(k)) {
                continue;
            }
            match writes.iter_mut().find(|(s, o, _)| s == site && o == op) {
                Some((_, _, ks)) => {
                    if !ks.contains(k) {
                        ks.push(*k);
                    }
                }
                None => writes.push((site.clone(), op.clone(), vec![*k])),
            }
        }
        for (site, op, mut params) in writes {
            params.sort_unstable();
            out.push(CutRec {
                kind: Category::ZeroGradOrder,
                op: op.to_string(),
                location: site.as_ref().and_then(|s| recorder.site_location(s)),
                related: Vec::new(),
                params,
                chain: Vec::new(),
                chain_from: None,
                step: self.step,
                within: None,
            });
        }
        recorder.capture.cuts.extend(out);
        let mut dropped: Vec<u64> = self
            .dropped
            .iter()
            .copied()
            .chain(self.made_by.values().copied())
            .collect();
        dropped.sort_unstable();
        dropped.dedup();
        for m in dropped {
            if !recorder.capture.unused_outputs.contains(&m) {
                recorder.capture.unused_outputs.push(m);
            }
        }
        // Unreached parameters no op read with recording on in the whole step (a live
        // parameter's address is never another tensor's).
        if self.ops > 0 {
            let mut never: Vec<u64> = unreached
                .iter()
                .filter(|(addr, _)| !self.read.contains(addr))
                .map(|(_, k)| *k)
                .collect();
            never.sort_unstable();
            for k in never {
                if !recorder.capture.unread_params.contains(&k) {
                    recorder.capture.unread_params.push(k);
                }
            }
        }
        self.clear();
    }

    /// Parameters no cut explains that the loss's graph does reach, below a custom
    /// Function's node: the backward ran and gave them nothing, so that Function's
    /// `backward` returned no gradient for the input they come through (the nearest such
    /// Function above each parameter is named).
    fn function_backward_cuts(
        &self,
        recorder: &Recorder,
        unreached: &FxHashMap<usize, u64>,
        out: &[CutRec],
    ) -> Vec<(usize, Vec<u64>, Vec<String>)> {
        let (Some(graph), false) = (
            recorder.capture.graph.as_ref(),
            self.function_nodes.is_empty(),
        ) else {
            return Vec::new();
        };
        let claimed: FxHashSet<u64> = out.iter().flat_map(|c| c.params.iter().copied()).collect();
        let left: FxHashSet<u64> = unreached
            .values()
            .copied()
            .filter(|k| !claimed.contains(k))
            .collect();
        if left.is_empty() {
            return Vec::new();
        }
        let n = graph.nodes.len();
        let mut consumers: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &(c, i) in &graph.edges {
            if let Some(v) = consumers.get_mut(i as usize) {
                v.push(c);
            }
        }
        let function_at: FxHashMap<u32, usize> = self.function_nodes.iter().copied().collect();
        // Per Function node: the parameters it is the nearest Function above, with the path
        // (node names from the parameter up to it).
        let mut found: Vec<(usize, Vec<u64>, Vec<String>)> = Vec::new();
        // One walk per parameter: at most 256 of them (each walk is bounded by the snapshot).
        let starts = graph
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.param.filter(|k| left.contains(k)).map(|k| (i, k)))
            .take(256);
        for (start, key) in starts {
            // Breadth-first towards the loss: the first Function node met is the nearest.
            let mut from: FxHashMap<u32, u32> = FxHashMap::default();
            let mut queue = std::collections::VecDeque::from([start as u32]);
            let mut hit = None;
            while let Some(i) = queue.pop_front() {
                if let Some(&call) = function_at.get(&i) {
                    hit = Some((i, call));
                    break;
                }
                for &c in consumers.get(i as usize).into_iter().flatten() {
                    if c as usize != start && !from.contains_key(&c) {
                        from.insert(c, i);
                        queue.push_back(c);
                    }
                }
            }
            let Some((at, call)) = hit else {
                continue;
            };
            let mut path = Vec::new();
            let mut i = at;
            while let Some(&prev) = from.get(&i) {
                if prev as usize == start {
                    break;
                }
                path.push(graph.nodes[prev as usize].name.clone());
                i = prev;
            }
            path.reverse();
            match found.iter_mut().find(|(c, _, _)| *c == call) {
                Some((_, params, _)) => params.push(key),
                None => found.push((call, vec![key], path)),
            }
        }
        found
    }

    /// An optimizer's `step()` (`name`: `Adam.step()`) changed `params` in place, each the
    /// tensor and the key of its parameter. The step's own ops pass the mode unrecorded (and a
    /// fused or `foreach` step writes lists no op names one by one), so these writes are what
    /// an autograd error raised by a later backward is matched to: a graph still to be
    /// backpropagated saved a parameter that the step then updated (a GAN's second loss on the
    /// discriminator's output, after the discriminator's step).
    pub fn optimizer_step<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        name: &str,
        params: &[(H::Value, u64)],
    ) {
        let op: Arc<str> = Arc::from(name);
        let mut site = None;
        for (t, key) in params {
            self.stepped.insert(h.addr(t));
            self.push_inplace(h, Some(t), &op, &mut site, Some(*key));
        }
    }

    /// Matches an in-place error raised by backward to the in-place op that caused it;
    /// whether one was found (and written into the capture).
    pub fn explain_error(&mut self, recorder: &mut Recorder, message: &str) -> bool {
        if message.contains("a leaf Variable that requires grad") {
            return false;
        }
        let Some(InplaceError {
            shape,
            node,
            at,
            expected,
        }) = parse_inplace_error(message)
        else {
            return false;
        };
        // The message names the tensor's node before or after the in-place op, sometimes
        // shortened ("Add" for AddBackward0).
        let names = |e: &&Inplace| {
            if node.is_empty() {
                // A tensor no node made (an input, a leaf): so was the in-place op's target.
                return e.node.is_none() && e.prev_node.is_none();
            }
            [e.prev_node.as_deref(), e.node.as_deref()]
                .into_iter()
                .flatten()
                .any(|n| n == node || n.starts_with(&node))
        };
        let in_range = |e: &&Inplace| e.version > expected && e.version <= at;
        // Among writes that fit, an optimizer's step before the ops inside it (recorded when
        // a closure kept the mode recording): the step is what the user's line called.
        let step_first = |e: &&Inplace| e.param.is_none();
        let numel = |s: &[i64]| s.iter().product::<i64>();
        // The same elements: the saved tensor may be a view of the target (`x.unsqueeze(1)`
        // of an input modified in place afterwards).
        let same_elements = |e: &&Inplace| !e.shape.is_empty() && numel(&e.shape) == numel(&shape);
        let hit = self
            .inplace
            .iter()
            .filter(names)
            .filter(|e| shape.is_empty() || e.shape == shape)
            .filter(in_range)
            .min_by_key(step_first)
            .or_else(|| {
                self.inplace
                    .iter()
                    .filter(names)
                    .filter(same_elements)
                    .filter(in_range)
                    .min_by_key(step_first)
            })
            .or_else(|| {
                self.inplace
                    .iter()
                    .filter(|e| e.shape == shape)
                    .filter(in_range)
                    .min_by_key(step_first)
            })
            .or_else(|| {
                // The saved tensor is a reshaping view of the in-place op's target (a linear
                // on a 3-d input saves its 2-d `AsStrided`/`View` of it): the same elements.
                let view = [
                    "AsStrided",
                    "View",
                    "UnsafeView",
                    "Reshape",
                    "Transpose",
                    "T",
                    "Permute",
                ]
                .iter()
                .any(|v| node == *v || node.strip_suffix("Backward0") == Some(*v));
                // A transposing view (a linear's weight, saved as `weight.t()`) has the
                // target's very sizes in another order: that tells it from another tensor of
                // as many elements (a bias).
                let sorted = |s: &[i64]| {
                    let mut s = s.to_vec();
                    s.sort_unstable();
                    s
                };
                let same_sizes = |e: &&Inplace| sorted(&e.shape) == sorted(&shape);
                (view && !shape.is_empty())
                    .then(|| {
                        self.inplace
                            .iter()
                            .filter(same_sizes)
                            .filter(in_range)
                            .min_by_key(step_first)
                            .or_else(|| {
                                self.inplace
                                    .iter()
                                    .filter(same_elements)
                                    .filter(in_range)
                                    .min_by_key(step_first)
                            })
                    })
                    .flatten()
            })
            // Last, the node alone: the shape in the message may be one the log never saw.
            .or_else(|| {
                self.inplace
                    .iter()
                    .filter(names)
                    .filter(in_range)
                    .min_by_key(step_first)
            });
        let Some(e) = hit else { return false };
        let node = e.prev_node.clone().unwrap_or(node);
        let mut loc = |s: &Option<Site>| s.as_ref().and_then(|s| recorder.site_location(s));
        let rec = InplaceRec {
            op: e.op.to_string(),
            location: loc(&e.site),
            saved_at: loc(&e.consumed),
            created_at: loc(&e.created),
            node,
            shape: e.shape.clone(),
            version: e.version,
            kind: Category::InplaceSaved,
            param: e.param,
        };
        recorder.capture.inplace.push(rec);
        true
    }

    /// The script died of an inference tensor torch refused where no op of the log ran
    /// (non-reentrant checkpointing saves a layer's inputs itself, before any op): the last
    /// `inference_mode` block the user's code entered made it, as [`OpLog::failed`] would say.
    /// Not when the model's parameters were built under such a block (told with the model),
    /// nor when an op's refusal already named its block.
    fn refused_unseen(&mut self, recorder: &Recorder) {
        let refused = recorder
            .capture
            .error
            .as_ref()
            .is_some_and(|e| refuses_inference_tensor(&e.message));
        if !refused
            || self.cuts.iter().any(|c| tells_inference(&c.op))
            || recorder.tells_inference()
        {
            return;
        }
        if let Some(block) = self
            .inference_block
            .clone()
            .or_else(|| recorder.inference_block.clone())
        {
            self.inference_data_cut(block, Vec::new());
        }
    }

    /// The `inference_mode` block at `block` made the tensor torch refused: a cut of its own
    /// that the loss depends on.
    fn inference_data_cut(&mut self, block: Site, related: Vec<(Site, &'static str)>) {
        let id = self.cuts.len() as u32;
        self.cuts.push(Cut {
            kind: Category::NoGrad,
            op: Arc::from(gradsleuth_model::capture::INFERENCE_DATA_OP),
            site: Some(block),
            related,
            nodes: Vec::new(),
            leaves: Vec::new(),
            siblings: Vec::new(),
            outputs: Vec::new(),
            direct: Vec::new(),
            upstream: Vec::new(),
            soft: false,
            inside: None,
        });
        union(&mut self.loss_taint, &[id]);
    }

    /// An op raised: an in-place op on a leaf that requires grad is `inplace_leaf`; an op
    /// refusing a tensor made under `inference_mode` ("Inference tensors cannot be saved for
    /// backward", "Inplace update to inference tensor outside InferenceMode", "A view was
    /// created in inference mode and is being modified inplace in normal mode") stands in for
    /// the loss the step never reached, so the cuts its inputs carry (the `inference_mode`
    /// block) are resolved as the loss's.
    pub fn failed<H: Host<Keeper = K, Kept = N>>(
        &mut self,
        h: &mut H,
        recorder: &mut Recorder,
        func: &H::Value,
        inputs: &[H::Value],
        message: &str,
    ) {
        if refuses_inference_tensor(message) {
            let why = if message.contains("Inference tensor") {
                "refused here: autograd would save it"
            } else {
                "refused here: updated in place outside `inference_mode`"
            };
            let mut tensors = Vec::new();
            for a in inputs {
                Self::tensors(h, a, &mut tensors);
            }
            // An input made from data under the block (ids, a mask, labels indexed there) is
            // the refused tensor: its block is the cause, whatever cuts the inputs carry from
            // upstream (a detector's proposals, detached by design, which its labels were
            // matched to). One made from parameters under the block carries the block's own
            // cut (no_grad), which names it: that path is taken below.
            let made_off = tensors.iter().find_map(|t| {
                let under_block = self
                    .taint
                    .get(&h.addr(t))
                    .filter(|(_, k)| h.holds(k, t))
                    .is_some_and(|(ts, _)| {
                        ts.iter().any(|c| {
                            self.cuts
                                .get(*c as usize)
                                .is_some_and(|c| c.kind == Category::NoGrad)
                        })
                    });
                self.off_made
                    .get(&h.addr(t))
                    .filter(|(_, k)| h.holds(k, t) && !under_block)
                    .map(|(s, _)| s.clone())
            });
            let before = self.loss_taint.len();
            for t in tensors.iter().filter(|_| made_off.is_none()) {
                if let Some((ts, keeper)) = self.taint.get(&h.addr(t)) {
                    if h.holds(keeper, t) {
                        let ts = ts.clone();
                        union(&mut self.loss_taint, &ts);
                    }
                }
            }
            // No parameter feeds the refused tensor: the block that made it is the cause,
            // told on its own.
            if self.loss_taint.len() == before {
                // Made where the log saw it, or else (made before the op-level window
                // opened) in the last `inference_mode` block the user's code entered: the
                // error proves an input is an inference tensor, and only such a block makes
                // one. Not when the model's parameters were built under such a block: they are
                // the refused ones, told with the model (the tracer's scan records that cut).
                let params_in = recorder
                    .capture
                    .cuts
                    .iter()
                    .any(|c| c.op == gradsleuth_model::capture::INFERENCE_PARAMS_OP);
                let made = made_off.or_else(|| {
                    (!params_in)
                        .then(|| {
                            self.inference_block
                                .clone()
                                .or_else(|| recorder.inference_block.clone())
                        })
                        .flatten()
                });
                if let Some(block) = made {
                    let related = h.stack(1).into_iter().map(|s| (s, why)).collect();
                    self.inference_data_cut(block, related);
                }
            }
            return;
        }
        if !message.contains("a leaf Variable that requires grad") {
            return;
        }
        let name = self.func_info(h, func).name.to_string();
        let location = h
            .stack(1)
            .into_iter()
            .next()
            .and_then(|s| recorder.site_location(&s));
        recorder.capture.inplace.push(InplaceRec {
            op: name,
            location,
            kind: Category::InplaceLeaf,
            ..Default::default()
        });
    }
}

fn order_has(taint: &[u32], id: usize) -> bool {
    taint.iter().any(|&t| t as usize == id)
}

/// A cut's related sites as the capture's locations (sites outside the user's code dropped).
fn related_of(recorder: &mut Recorder, related: &[(Site, &'static str)]) -> Vec<Related> {
    related
        .iter()
        .filter_map(|(s, m)| {
            Some(Related {
                location: recorder.site_location(s)?,
                message: (*m).to_owned(),
            })
        })
        .collect()
}
