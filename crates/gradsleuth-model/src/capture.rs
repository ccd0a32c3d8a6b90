//! The capture: a plain, versioned record of what the tracer observed.
//!
//! Identities are small integer keys handed out by the recorder (never `id()` values, which
//! Python reuses). Sequence numbers (`seq`) order events across kinds, so the analysis can ask
//! "was `zero_grad` called between this backward and that step?".

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::finding::Location;

/// Identifies the file format; checked on load.
pub const CAPTURE_FORMAT: &str = "gradsleuth-capture";
/// Bumped whenever a field changes meaning or disappears.
pub const CAPTURE_VERSION: u32 = 1;

/// Errors loading a capture.
#[derive(Debug, Error)]
pub enum CaptureError {
    #[error("not a gradsleuth capture: {0}")]
    Malformed(String),
    #[error("capture format version {found} is not supported (this gradsleuth reads version {expected})")]
    Version { found: u64, expected: u32 },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Target {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// Source paths or a log file (lint, explain).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// Distributed: which process of which job a capture comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DistInfo {
    pub rank: u32,
    pub world_size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

/// The last thing the tracer saw the script do. Under a launcher the capture is rewritten at
/// each phase of the observed steps, so a rank that hangs or is killed still says where it was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// 1-based training step.
    pub step: u32,
    pub phase: Phase,
}

/// Where in a training step the script was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    #[default]
    Forward,
    Backward,
    /// The optimizer step finished.
    Step,
    /// Observation over.
    Done,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Step => "step",
            Phase::Done => "done",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The autograd graph of the first traced loss (for the picture): node types, the module that
/// made each node, the parameter behind each leaf, edges from a node to its inputs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphRec {
    pub nodes: Vec<GraphNode>,
    /// (consumer, input): index pairs into `nodes`, in autograd's direction (loss → params).
    pub edges: Vec<(u32, u32)>,
    /// The walk stopped at its node budget or its depth limit.
    #[serde(default)]
    pub truncated: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphNode {
    /// Autograd node type, e.g. `AddmmBackward0`, `AccumulateGrad`.
    pub name: String,
    /// Key of the module whose forward created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<u64>,
    /// For `AccumulateGrad`: the tensor key of the parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<u64>,
}

/// `watch`: gradient health over a whole run, kept bounded (summaries and a series of at most
/// a fixed number of buckets per layer, however long the run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchRec {
    /// Optimizer steps seen.
    pub steps: u64,
    pub thresholds: WatchThresholds,
    #[serde(default)]
    pub params: Vec<WatchParam>,
    #[serde(default)]
    pub layers: Vec<WatchLayer>,
    #[serde(default)]
    pub events: Vec<WatchEvent>,
    /// GradScaler: steps seen and steps it skipped (inf/NaN gradients).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaler: Option<(u64, u64)>,
    /// The first non-finite gradient, traced to its op and line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nan: Option<NanTrace>,
    /// Where TensorBoard event files were written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<String>,
    /// Findings of the op-level steps that anomalies armed (where the graph was cut).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deep: Vec<crate::finding::Finding>,
}

/// Detector thresholds (defaults and their reasoning in `docs/watch.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WatchThresholds {
    /// A layer is exploding when its gradient norm exceeds this many times its running median.
    pub explode_factor: f64,
    /// ... or this absolute norm.
    pub explode_abs: f64,
    /// A layer is vanishing when its gradient norm stays below this fraction of the largest
    /// layer's norm in the same step ...
    pub vanish_ratio: f64,
    /// ... for this many consecutive steps (also: dead layers, parameters that stop learning).
    pub patience: u64,
    /// Steps before the explode/vanish detectors judge (statistics warm up).
    pub warmup: u64,
    /// GradScaler skip storm: this fraction of the last `scaler_window` steps skipped.
    pub scaler_skip_fraction: f64,
    pub scaler_window: u64,
    /// The update-to-weight ratio is measured every this many steps. It moves slowly, and each
    /// sample costs four passes over the parameters (a copy before the step, a subtraction and
    /// two norms after it): on a memory-bound model about an eighth of a step.
    pub update_every: u64,
}

impl Default for WatchThresholds {
    fn default() -> Self {
        WatchThresholds {
            explode_factor: 100.0,
            explode_abs: 1e6,
            vanish_ratio: 1e-7,
            patience: 20,
            warmup: 10,
            scaler_skip_fraction: 0.5,
            scaler_window: 20,
            update_every: 20,
        }
    }
}

/// Summary statistics of a series (finite values only in min/max/mean).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SeriesSummary {
    pub count: u64,
    pub none: u64,
    pub zero: u64,
    pub nonfinite: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchParam {
    pub name: String,
    /// The module (layer) it belongs to.
    pub layer: String,
    pub grad_norm: SeriesSummary,
    pub update_ratio: SeriesSummary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_nonzero_step: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_nonfinite_step: Option<u64>,
}

/// One layer's gradient flow over the run, in buckets of `stride` steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchLayer {
    pub name: String,
    pub stride: u64,
    pub buckets: Vec<WatchBucket>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchBucket {
    /// First step of the bucket (1-based).
    pub step: u64,
    pub steps: u64,
    /// Layer gradient norm: mean and max over the bucket's finite values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Steps where the layer had no gradient / an exactly zero one / a non-finite one.
    #[serde(default)]
    pub none: u64,
    #[serde(default)]
    pub zero: u64,
    #[serde(default)]
    pub nonfinite: u64,
    /// Mean update-to-weight ratio of the sampled steps in the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_ratio: Option<f64>,
}

/// An anomaly the monitor saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchEvent {
    pub kind: WatchEventKind,
    /// First step it was seen, and the last (for sustained ones).
    pub step: u64,
    #[serde(default)]
    pub until: u64,
    /// Layer or parameter names concerned.
    #[serde(default)]
    pub names: Vec<String>,
    /// The value that crossed the threshold (norm, ratio, fraction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default)]
    pub detail: String,
}

/// What kind of anomaly the monitor saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchEventKind {
    /// A NaN/Inf gradient.
    #[default]
    Nonfinite,
    Exploding,
    Vanishing,
    Dead,
    /// Learned, then stopped getting a gradient.
    Stopped,
    /// GradScaler skipping most steps.
    ScalerStorm,
}

impl WatchEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEventKind::Nonfinite => "nonfinite",
            WatchEventKind::Exploding => "exploding",
            WatchEventKind::Vanishing => "vanishing",
            WatchEventKind::Dead => "dead",
            WatchEventKind::Stopped => "stopped",
            WatchEventKind::ScalerStorm => "scaler_storm",
        }
    }
}

/// Statistics of one tensor, for the inputs of the op that went non-finite.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorStats {
    pub shape: Vec<i64>,
    pub dtype: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    #[serde(default)]
    pub nan: u64,
    #[serde(default)]
    pub inf: u64,
    /// Elements that are exactly zero (a log/div/sqrt input).
    #[serde(default)]
    pub zeros: u64,
}

/// Where the first non-finite value came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NanTrace {
    /// The step whose gradients were first non-finite.
    pub step: u64,
    /// Parameters whose gradient was non-finite in that step.
    #[serde(default)]
    pub params: Vec<String>,
    /// The first forward op whose output was non-finite (from finite inputs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_op: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_at: Option<Location>,
    #[serde(default)]
    pub forward_inputs: Vec<TensorStats>,
    /// The first backward node that produced a non-finite gradient from finite ones, and the
    /// forward op (and line) that created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_op: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward_at: Option<Location>,
    /// The gradient reaching the model's output was already non-finite: the loss code made it.
    #[serde(default)]
    pub from_loss: bool,
    /// How it was found (`replay`: the step's forward and backward re-run from its inputs with
    /// checks; `next_step`: the following step traced).
    #[serde(default)]
    pub method: String,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A module object seen by the tracer (a model root, a registered submodule, a module kept
/// in a plain container, or one that only ever ran as an orphan).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModuleRec {
    pub key: u64,
    /// Python class name, e.g. `Linear`.
    pub class: String,
    /// Key of the model root this module belongs to (itself for a root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u64>,
    /// Qualified name inside its root (`encoder.layers.0`); for a root, its display name.
    pub name: String,
    /// The owning module and the attribute path under it (`heads[1]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    #[serde(default)]
    pub attr: String,
    /// `registered` (in `_modules`), `container` (inside a plain list/dict/tuple attribute),
    /// `root`, or `orphan` (ran inside a model's forward, attached to nothing).
    pub kind: ModuleKind,
    /// Where the class is defined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_def: Option<Location>,
    /// Where `forward` of the class is defined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_def: Option<Location>,
    /// Where the module was assigned in its parent's source (`self.fc = nn.Linear(...)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_at: Option<Location>,
    /// Observed forward calls: in how many root calls it ran.
    #[serde(default)]
    pub runs: u32,
    /// Of those, how many ran with gradient recording disabled.
    #[serde(default)]
    pub runs_no_grad: u32,
    /// Of those, how many ran on tensors put in place of its own parameters
    /// (`torch.func.functional_call`, `torch.nn.utils.stateless`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runs_stateless: u32,
    /// Where it was first called from (user frame): the line in its parent's `forward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_call: Option<Location>,
    /// Distinct objects of this kind seen at the same call site (orphans rebuilt per call).
    #[serde(default)]
    pub instances: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleKind {
    Root,
    #[default]
    Registered,
    Container,
    Orphan,
}

/// A tensor that is, or looks like, a parameter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorRec {
    pub key: u64,
    /// Qualified name as the user would write it (`blocks[1].weight`).
    pub name: String,
    pub kind: TensorKind,
    /// The module that owns it (for `Foreign`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<u64>,
    /// Attribute name on the owning module.
    #[serde(default)]
    pub attr: String,
    #[serde(default)]
    pub shape: Vec<i64>,
    #[serde(default)]
    pub dtype: String,
    pub requires_grad: bool,
    pub is_leaf: bool,
    /// Whether the object is an `nn.Parameter`.
    #[serde(default)]
    pub is_parameter: bool,
    /// For a non-leaf: the chain of autograd nodes from it down to the leaf it came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grad_fn_chain: Vec<String>,
    /// For a non-leaf: the key of the leaf behind it, when tracked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf: Option<u64>,
    /// Where it was assigned in its module's source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_at: Option<Location>,
    /// Sharded (an FSDP2 `DTensor`): elements of the shard this rank holds. `Some(0)`: none,
    /// so this rank cannot judge it (the ranks holding its shards do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_numel: Option<u64>,
    /// Where its `requires_grad` was last set to False, when observed (the freeze's line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen_at: Option<Location>,
    /// An installed library's code froze it (PEFT's `get_peft_model` freezing the base), and
    /// whether the script's own code unfroze it afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_freeze: Option<LibraryFreeze>,
}

/// A freeze an installed library made as part of its design, and what the script did to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LibraryFreeze {
    /// The package whose code set `requires_grad` to False (`peft`).
    pub package: String,
    /// The user's line whose call froze it (`model = get_peft_model(model, config)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Location>,
    /// The user's line that set `requires_grad` back to True afterwards (code of the same
    /// package unfreezing it, as PEFT does for `bias="all"`, ends the record instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfrozen_at: Option<Location>,
    /// The same package had set it back to True earlier while observing, and a backward ran
    /// while it was on: a flag it turns off only around other parameters' steps (Lightning's
    /// `toggle_optimizer`), not a freeze.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub toggled: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorKind {
    /// In `named_parameters()`.
    #[default]
    Param,
    /// A tensor requiring grad in a plain list/dict/tuple attribute, or a parameter of a
    /// module kept in one.
    Container,
    /// A plain tensor attribute (`self.w = torch.randn(..., requires_grad=True)`).
    Attribute,
    /// Registered with `register_buffer`.
    Buffer,
    /// A parameter of an orphan module (built inside forward).
    Orphan,
    /// Held by an optimizer, found on no model.
    Foreign,
    /// A leaf found only behind a non-leaf attribute.
    Hidden,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OptimizerRec {
    pub key: u64,
    pub class: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Location>,
    /// Tensor keys in its param groups.
    #[serde(default)]
    pub params: Vec<u64>,
    /// Learning rates of its param groups.
    #[serde(default)]
    pub lrs: Vec<f64>,
    /// How many of `params` each param group holds, in order (empty when unknown).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_sizes: Vec<u32>,
}

impl OptimizerRec {
    /// The learning rate of the param group holding tensor `key` (None when unknown).
    pub fn lr_of(&self, key: u64) -> Option<f64> {
        let i = self.params.iter().position(|k| *k == key)?;
        if self.group_sizes.is_empty() {
            return (self.lrs.len() == 1).then(|| self.lrs[0]);
        }
        let mut end = 0usize;
        for (g, n) in self.group_sizes.iter().enumerate() {
            end += *n as usize;
            if i < end {
                return self.lrs.get(g).copied();
            }
        }
        None
    }
}

/// A call of `backward()`/`torch.autograd.backward` or `torch.autograd.grad`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackwardRec {
    pub seq: u64,
    pub kind: BackwardKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// Name of the loss's `grad_fn` (None when the loss has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_grad_fn: Option<String>,
    /// Tensor keys whose gradient was accumulated (post-accumulate-grad hooks), or, for
    /// `autograd.grad`, inputs that received a gradient.
    #[serde(default)]
    pub reached: Vec<u64>,
    /// Gradient norms right after this backward, for tracked tensors no optimizer holds.
    #[serde(default)]
    pub grad_norms: Vec<(u64, Option<f64>)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For `autograd.grad(outputs, inputs, create_graph=True)`: tracked tensors the outputs
    /// depend on that the returned derivatives do not (a bias that only shifts an energy whose
    /// gradient the loss uses). A loss built from those derivatives cannot reach them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constant_in_derivative: Vec<u64>,
}

/// Which call started a backward pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackwardKind {
    /// `loss.backward()` / `torch.autograd.backward`.
    #[default]
    Backward,
    /// `torch.autograd.grad`.
    Grad,
}

/// One `optimizer.step()` as seen by the global step hooks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRec {
    /// Sequence number of the pre-step hook.
    pub seq: u64,
    pub optimizer: u64,
    /// 1-based count of this optimizer's steps.
    pub index: u32,
    /// Per tensor: gradient norm before the step (None where `.grad` was None).
    #[serde(default)]
    pub grad_norms: Vec<(u64, Option<f64>)>,
    /// Per tensor: weight norm before and after the step.
    #[serde(default)]
    pub weight_before: Vec<(u64, f64)>,
    #[serde(default)]
    pub weight_after: Vec<(u64, f64)>,
}

/// A `zero_grad()` call on an optimizer or module.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ZeroGradRec {
    pub seq: u64,
    pub target: ZeroGradTarget,
    pub key: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

/// What `zero_grad()` was called on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroGradTarget {
    #[default]
    Optimizer,
    Module,
}

/// A `GradScaler.step(optimizer)` call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScalerStepRec {
    pub seq: u64,
    pub optimizer: u64,
    /// Whether the optimizer actually stepped during it.
    pub stepped: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

/// Ends the `op` of a cut that is an op's index output (`Tensor.topk.indices`: `x.topk(k)`'s
/// indices, while its values keep their history).
pub const INDICES_SUFFIX: &str = ".indices";

/// Ops that draw random samples from a distribution their tensor input gives (by the op's
/// last name: `torch.multinomial`, `Tensor.bernoulli`): a draw carries no gradient to it.
pub const SAMPLERS: &[&str] = &[
    "multinomial",
    "bernoulli",
    "poisson",
    "binomial",
    "_standard_gamma",
    "_sample_dirichlet",
];

/// Ends the `op` of a cut that is a custom `autograd.Function`'s call (`Quant.apply`): the
/// tracer shows the whole call to the op log as one op, so an output that needs no grad from
/// inputs that do (`ctx.mark_non_differentiable`) is a cut at the line that applied it.
pub const FUNCTION_APPLY_SUFFIX: &str = ".apply";

/// Ends the `op` of an in-place write that is an optimizer's `step()` (`Adam.step()`): the
/// step updated a parameter that a graph still to be backpropagated had saved.
pub const OPTIMIZER_STEP_SUFFIX: &str = ".step()";

/// The `op` of a cut that is a tensor made from data under `inference_mode` and refused by an
/// op that autograd records: no parameter is cut off, the step fails in forward.
pub const INFERENCE_DATA_OP: &str = "inference tensor";

/// The `op` of a cut naming a model's parameters made under `inference_mode` (the tracer's
/// scan finds them): they are inference tensors and can never be trained.
pub const INFERENCE_PARAMS_OP: &str = "torch.inference_mode";

/// The message of a cut's related place that is the library line where the op ran, when the
/// user's line (the cut's location) called into an installed library.
pub const INSIDE_LIBRARY: &str = "where it happens, inside the library";

/// The op of a `no_grad` cut made by reentrant gradient checkpointing whose inputs do not
/// require grad: the checkpointed forward runs without recording and its output has no
/// history (torch warns "None of the inputs have requires_grad=True").
pub const CHECKPOINT_OP: &str = "torch.utils.checkpoint";

/// Where the op-level capture saw a parameter's influence stop reaching the loss: the cut
/// (an op whose inputs need grad and whose outputs do not) that the loss depends on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CutRec {
    /// The schema category of the cut (`detach`, `data_attr`, `no_grad`, `rewrap`,
    /// `numpy_roundtrip`, `non_differentiable`, `dead_path`, `loss_rewrap`, `create_graph`,
    /// and the tracer's own `grad_clip`, `grad_hook`, `stale_tensor`).
    pub kind: crate::finding::Category,
    /// The op as the user wrote it, e.g. `Tensor.detach`, `torch.tensor`.
    pub op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// Other places in the chain: the `no_grad` entry, where a round trip left the graph.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<crate::finding::Related>,
    /// Tensor keys whose only path to the loss goes through this cut.
    #[serde(default)]
    pub params: Vec<u64>,
    /// Autograd nodes from a parameter up to the cut.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
    /// The parameter `chain` starts from (one of `params`; None: the chain names no node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_from: Option<u64>,
    /// Which observed step it was recorded in (1-based).
    #[serde(default)]
    pub step: u32,
    /// Where the cut happened when it is not at an op of the user's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<Within>,
}

/// Where a cut happened, when not at an op of the user's own ([`CutRec::within`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Within {
    /// A `no_grad` cut inside a call of torch's or a library's that turns recording off
    /// itself (`Normal.sample`, `GenerationMixin.generate`): the call's name. The user's line
    /// is the cut's location; no block of theirs is to blame.
    Call(String),
    /// A custom `autograd.Function` (its class) whose `backward` returned no gradient for the
    /// input the parameters reach the loss through; the cut's location is where the user's
    /// code applied it.
    FunctionBackward(String),
}

/// An in-place op on a tensor that autograd had saved, matched to the error it caused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InplaceRec {
    pub op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// Where the tensor was consumed (and saved for backward) before the in-place op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_at: Option<Location>,
    /// Where the tensor was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Location>,
    /// The backward node named by the error (`ReluBackward0`).
    #[serde(default)]
    pub node: String,
    #[serde(default)]
    pub shape: Vec<i64>,
    #[serde(default)]
    pub version: u64,
    /// `inplace_saved` or `inplace_leaf`.
    #[serde(default)]
    pub kind: crate::finding::Category,
    /// The parameter an optimizer's step updated in place (`op` ends with
    /// [`OPTIMIZER_STEP_SUFFIX`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<u64>,
}

/// The exception a script ended with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScriptError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// The traceback's files, outermost first (library ones too): what called what.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<String>,
    /// For an object that could not be serialised: the path from one of the traceback's
    /// variables to it (`model.head._forward_hooks[3]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// Everything one traced run observed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capture {
    pub format: String,
    pub version: u32,
    pub tool_version: String,
    /// `run` or `diagnose`.
    pub command: String,
    #[serde(default)]
    pub target: Target,
    #[serde(default)]
    pub environment: Environment,
    /// Observation limit asked for (`--steps`).
    #[serde(default)]
    pub steps_requested: u32,
    #[serde(default)]
    pub modules: Vec<ModuleRec>,
    #[serde(default)]
    pub tensors: Vec<TensorRec>,
    #[serde(default)]
    pub optimizers: Vec<OptimizerRec>,
    #[serde(default)]
    pub backwards: Vec<BackwardRec>,
    #[serde(default)]
    pub steps: Vec<StepRec>,
    #[serde(default)]
    pub zero_grads: Vec<ZeroGradRec>,
    #[serde(default)]
    pub scaler_steps: Vec<ScalerStepRec>,
    /// Forward calls of model roots observed.
    #[serde(default)]
    pub root_calls: u32,
    /// Per tensor: did it change over the observed steps (exact float64 norms)? Small updates
    /// can leave a float32 norm unchanged in a single step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_changes: Vec<(u64, bool)>,
    /// Parameters whose values were all zero at the end of observation (a zero-initialised
    /// layer that never changed): a product with them gives every path behind it a zero
    /// gradient.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zero_valued: Vec<u64>,
    /// Parameters whose values were loaded from a checkpoint during the run: by torch's
    /// `load_state_dict` (each module's `_load_from_state_dict`), or marked loaded by
    /// transformers' `from_pretrained`. A model with some of these and a parameter outside
    /// them has that parameter freshly initialised (a new classification head).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded: Vec<u64>,
    /// Parameters frozen by their own module's constructor (`self.pe.requires_grad = False`
    /// in the `__init__` that created it): part of the architecture, not a training choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub built_frozen: Vec<u64>,
    /// Op-level: cuts between parameters and the loss, with their lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cuts: Vec<CutRec>,
    /// Op-level: modules that made an output (needing grad) that no later op used, such as
    /// a library model's pooler when the loss takes only the hidden states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unused_outputs: Vec<u64>,
    /// Op-level: parameters no gradient reached that no op read during the step (a library
    /// model's parameter only its `forward` uses, when the script calls another method).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread_params: Vec<u64>,
    /// Op-level: in-place ops matched to an autograd error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inplace: Vec<InplaceRec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ScriptError>,
    /// Distributed: rank and world size (absent for a single process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dist: Option<DistInfo>,
    /// The last phase observed (written as the script goes under a launcher).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// `watch`: gradient health over the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchRec>,
    /// The autograd graph of the first traced loss (op-level step), for the picture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphRec>,
    /// Notes from the tracer itself (a hook that failed, a region it could not see).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Processes the script started (DataLoader workers excepted): work done in them is not
    /// observed here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildRec>,
    /// Wall time of each observed iteration (first forward or previous step to this step),
    /// and whether it ran at op level: what the diagnosis cost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_seconds: Vec<StepTime>,
    /// Probe runs (`gradsleuth bisect`): the value of each scalar loss passed to backward,
    /// in order (a host read per backward; never recorded otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "real::many")]
    pub losses: Vec<f64>,
    /// Probe runs: a summary of every op's tensor outputs in the op-level step, in call
    /// order, to find the first op whose result differs between two environments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub op_digests: Vec<OpDigest>,
}

/// One op of a probe run's op-level step and what it returned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpDigest {
    /// The torch function (`Tensor.add`, `conv2d`).
    pub op: String,
    /// The user's line that called it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// Each tensor output, in order.
    pub outputs: Vec<TensorDigest>,
}

/// A tensor summarised without its data: enough to tell two results apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorDigest {
    pub shape: Vec<i64>,
    pub dtype: String,
    /// Sum of the elements, in float64 (of the real part for complex tensors).
    #[serde(with = "real")]
    pub sum: f64,
    /// Euclidean norm, in float64 (NaN when an element is not finite).
    #[serde(with = "real")]
    pub norm: f64,
}

/// A float that may be NaN or infinite: JSON has no such numbers, so they are written as the
/// strings `"nan"`, `"inf"`, `"-inf"` (and `null` reads as NaN).
pub mod real {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("nan")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Any {
        Number(f64),
        Text(String),
        Null(()),
    }

    fn from(a: Any) -> Result<f64, String> {
        match a {
            Any::Number(n) => Ok(n),
            Any::Null(()) => Ok(f64::NAN),
            Any::Text(t) => match t.as_str() {
                "nan" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                other => Err(format!("not a number: {other:?}")),
            },
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        from(Any::deserialize(d)?).map_err(serde::de::Error::custom)
    }

    /// The same for a list.
    pub mod many {
        use serde::ser::SerializeSeq;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
            struct One(f64);
            impl serde::Serialize for One {
                fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    super::serialize(&self.0, s)
                }
            }
            let mut seq = s.serialize_seq(Some(v.len()))?;
            for x in v {
                seq.serialize_element(&One(*x))?;
            }
            seq.end()
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
            Vec::<super::Any>::deserialize(d)?
                .into_iter()
                .map(|a| super::from(a).map_err(serde::de::Error::custom))
                .collect()
        }
    }
}

/// One observed iteration's wall time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTime {
    pub seconds: f64,
    pub op_level: bool,
}

/// Child processes started with one target from one line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildRec {
    /// The function the processes run (`train`, `main.<locals>.worker`).
    pub target: String,
    /// The start method (`fork`, `spawn`, `forkserver`).
    pub method: String,
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

impl Default for Capture {
    fn default() -> Self {
        Capture {
            format: CAPTURE_FORMAT.to_owned(),
            version: CAPTURE_VERSION,
            tool_version: crate::TOOL_VERSION.to_owned(),
            command: "run".to_owned(),
            target: Target::default(),
            environment: Environment::default(),
            steps_requested: 0,
            modules: Vec::new(),
            tensors: Vec::new(),
            optimizers: Vec::new(),
            backwards: Vec::new(),
            steps: Vec::new(),
            zero_grads: Vec::new(),
            scaler_steps: Vec::new(),
            root_calls: 0,
            weight_changes: Vec::new(),
            zero_valued: Vec::new(),
            loaded: Vec::new(),
            built_frozen: Vec::new(),
            cuts: Vec::new(),
            unused_outputs: Vec::new(),
            unread_params: Vec::new(),
            inplace: Vec::new(),
            error: None,
            dist: None,
            progress: None,
            watch: None,
            graph: None,
            notes: Vec::new(),
            children: Vec::new(),
            step_seconds: Vec::new(),
            losses: Vec::new(),
            op_digests: Vec::new(),
        }
    }
}

impl Capture {
    /// Parses a capture, checking the format tag and version before the fields, so that a
    /// file from another tool or version gets a precise message.
    pub fn from_json(text: &str) -> Result<Capture, CaptureError> {
        /// The tag and version only; every other field is skipped without being built.
        #[derive(Deserialize)]
        struct Header {
            format: Option<serde_json::Value>,
            version: Option<serde_json::Value>,
        }
        let header: Header = serde_json::from_str(text).map_err(|e| {
            if e.is_data() {
                CaptureError::Malformed("the top level is not an object".into())
            } else {
                CaptureError::Malformed(format!("invalid JSON ({e})"))
            }
        })?;
        if header.format.as_ref().and_then(|f| f.as_str()) != Some(CAPTURE_FORMAT) {
            return Err(CaptureError::Malformed(format!(
                "missing \"format\": \"{CAPTURE_FORMAT}\""
            )));
        }
        let version = header
            .version
            .as_ref()
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        if version != u64::from(CAPTURE_VERSION) {
            return Err(CaptureError::Version {
                found: version,
                expected: CAPTURE_VERSION,
            });
        }
        serde_json::from_str(text).map_err(|e| CaptureError::Malformed(e.to_string()))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    pub fn module(&self, key: u64) -> Option<&ModuleRec> {
        self.modules.iter().find(|m| m.key == key)
    }

    pub fn optimizer(&self, key: u64) -> Option<&OptimizerRec> {
        self.optimizers.iter().find(|o| o.key == key)
    }
}

/// serde: a zero count is left out (captures without it read as zero).
fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_values_keep_nan_and_infinities_through_json() {
        let c = Capture {
            losses: vec![0.5, f64::NAN, f64::INFINITY],
            op_digests: vec![OpDigest {
                op: "log".into(),
                location: None,
                outputs: vec![TensorDigest {
                    shape: vec![2],
                    dtype: "torch.float32".into(),
                    sum: f64::NEG_INFINITY,
                    norm: f64::NAN,
                }],
            }],
            ..Default::default()
        };
        let back = Capture::from_json(&c.to_json()).unwrap();
        assert_eq!(back.losses[0], 0.5);
        assert!(back.losses[1].is_nan() && back.losses[2] == f64::INFINITY);
        let t = &back.op_digests[0].outputs[0];
        assert!(t.sum == f64::NEG_INFINITY && t.norm.is_nan());
        assert!(c.to_json().contains("\"-inf\""));
    }

    #[test]
    fn round_trips_through_json() {
        let mut c = Capture::default();
        c.tensors.push(TensorRec {
            key: 3,
            name: "fc.weight".into(),
            requires_grad: true,
            is_leaf: true,
            shape: vec![4, 2],
            ..Default::default()
        });
        let back = Capture::from_json(&c.to_json()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        for bad in [
            "",
            "nope",
            "[1,2]",
            "{\"format\":\"x\"}",
            "{\"format\":\"gradsleuth-capture\",\"version\":99}",
        ] {
            let err = Capture::from_json(bad).unwrap_err().to_string();
            assert!(!err.is_empty(), "{bad}");
        }
        let err =
            Capture::from_json("{\"format\":\"gradsleuth-capture\",\"version\":99}").unwrap_err();
        assert!(err.to_string().contains("version 99"));
        let err =
            Capture::from_json("{\"format\":\"gradsleuth-capture\",\"version\":1,\"modules\":3}")
                .unwrap_err();
        assert!(matches!(err, CaptureError::Malformed(_)));
    }
}
