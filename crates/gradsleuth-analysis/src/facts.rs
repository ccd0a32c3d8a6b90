//! Per-tensor facts derived from a capture: the ground the checks stand on.

use std::collections::{BTreeMap, HashMap};

use gradsleuth_model::capture::{Capture, TensorKind, TensorRec};
use gradsleuth_model::{ParamRow, ParamStatus};

/// The tracer encodes non-finite norms as negative numbers (JSON has no NaN).
pub const NORM_NAN: f64 = -1.0;
pub const NORM_INF: f64 = -2.0;

fn decode(n: Option<f64>) -> Option<f64> {
    match n {
        Some(x) if x == NORM_NAN => Some(f64::NAN),
        Some(x) if x == NORM_INF => Some(f64::INFINITY),
        other => other,
    }
}

/// How many machine epsilons of its module's largest gradient a gradient may reach and still be
/// rounding (float32: 1.2e-4; the noise of a cancelled float32 sum measures 1e-6 to 1e-5).
pub const ROUNDING_EPSILONS: f64 = 1000.0;

/// Machine epsilon of a floating dtype as the capture spells it (`float32`, `torch.float64`);
/// None for half precision and anything else.
fn epsilon(dtype: &str) -> Option<f64> {
    match dtype.trim_start_matches("torch.") {
        "float32" | "float" => Some(f64::from(f32::EPSILON)),
        "float64" | "double" => Some(f64::EPSILON),
        _ => None,
    }
}

/// What happened to one tracked tensor.
#[derive(Debug, Clone)]
pub struct TensorFacts {
    pub key: u64,
    /// Keys of the optimizers holding it.
    pub optimizers: Vec<u64>,
    /// Indices (into `capture.backwards`) of the backward calls that reached it.
    pub reached_in: Vec<usize>,
    /// Gradient norm per observed step (None: no gradient).
    pub grad_norms: Vec<Option<f64>>,
    /// Norm of the weight change per observed step (|‖w′‖ − ‖w‖|; None: no step measured).
    pub updates: Vec<Option<f64>>,
    /// Some optimizer step changed it.
    pub changed: bool,
    /// Only optimizers that never stepped hold it, and its weights are bit for bit what they
    /// were after the first backward (nothing else, a manual update, changed them either).
    pub never_stepped: bool,
    /// Only optimizers that had not stepped yet hold it (or, with no optimizer, the script's
    /// own update had not changed it yet), and the script raised before its loop came around
    /// (a `backward()` line running a second time): the update it would have made was never
    /// reached (a GAN's generator step, after its loss's backward failed).
    pub step_not_reached: bool,
    /// The run created no optimizer, and its weights are bit for bit what they were after the
    /// first backward gave it a gradient: the script's own update (if any) never changed it.
    pub unchanged_by_hand: bool,
    /// Its weight norm at the last observed step.
    pub weight_norm: Option<f64>,
    pub status: ParamStatus,
    /// Shown as a row of the parameter table.
    pub visible: bool,
}

impl TensorFacts {
    pub fn grad_nonzero(&self) -> bool {
        self.grad_norms
            .iter()
            .any(|g| matches!(g, Some(n) if *n != 0.0))
    }
    pub fn reached(&self) -> bool {
        !self.reached_in.is_empty()
    }
    /// Gradients so small against the weight that a step cannot change it in floating point
    /// (under 1e-6 of the weight norm): the loss is numerically invariant to it.
    pub fn negligible_grad(&self) -> bool {
        let g = self
            .grad_norms
            .iter()
            .flatten()
            .fold(0.0f64, |a, b| a.max(*b));
        match self.weight_norm {
            Some(w) if w > 0.0 => g.is_finite() && g <= w * 1e-6,
            _ => g == 0.0,
        }
    }

    pub fn learns(&self) -> bool {
        self.status == ParamStatus::Learning
    }
}

/// Facts for a whole capture.
pub struct Facts {
    pub steps_observed: u32,
    /// Some optimizer stepped at least once.
    pub any_optimizer_step: bool,
    pub tensors: BTreeMap<u64, TensorFacts>,
    /// Tensor records by key, in capture order.
    order: Vec<u64>,
    recs: HashMap<u64, TensorRec>,
}

impl Facts {
    pub fn derive(capture: &Capture) -> Facts {
        Self::derive_with(capture, &mut gradsleuth_source::SourceCache::new())
    }

    /// The facts, reading the script's source where the capture alone cannot tell (whether a
    /// step was still to come when the script raised).
    pub fn derive_with(capture: &Capture, source: &mut gradsleuth_source::SourceCache) -> Facts {
        let mut by_opt: HashMap<u64, Vec<u64>> = HashMap::new();
        for o in &capture.optimizers {
            for &p in &o.params {
                by_opt.entry(p).or_default().push(o.key);
            }
        }
        let mut reached: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, b) in capture.backwards.iter().enumerate() {
            for &k in &b.reached {
                let v = reached.entry(k).or_default();
                if v.last() != Some(&i) {
                    v.push(i);
                }
            }
        }
        // Steps per optimizer, in order.
        let mut steps_of: BTreeMap<u64, Vec<&gradsleuth_model::capture::StepRec>> = BTreeMap::new();
        for s in &capture.steps {
            steps_of.entry(s.optimizer).or_default().push(s);
        }
        let any_optimizer_step = !capture.steps.is_empty();
        // The primary timeline: the optimizer that stepped most (first on ties); without
        // optimizer steps, one entry per backward.
        let primary: Vec<u64> = steps_of
            .values()
            .max_by_key(|v| (v.len(), std::cmp::Reverse(v.first().map(|s| s.seq))))
            .map(|v| v.iter().map(|s| s.seq).collect())
            .unwrap_or_default();
        let steps_observed = if any_optimizer_step {
            primary.len() as u32
        } else {
            capture.backwards.len() as u32
        };

        // The script raised before its loop came around, or before it reached the step its
        // loop takes after the backward (every N batches under gradient accumulation, where
        // the loop comes around without a step by design): a step it had not taken yet may
        // simply not have been reached.
        let cut_short = capture.error.is_some() && {
            let mut lines = std::collections::HashSet::new();
            let came_around = capture.backwards.iter().any(|b| {
                b.location
                    .as_ref()
                    .is_some_and(|l| !lines.insert((l.file.as_str(), l.line)))
            });
            let step_ahead = capture.steps.is_empty()
                && capture.scaler_steps.is_empty()
                && capture
                    .backwards
                    .first()
                    .and_then(|b| b.location.as_ref())
                    .is_some_and(|l| source.step_later_in_loop(&l.file, l.line).is_some());
            !came_around || step_ahead
        };
        let uncalled = uncalled_layers(capture);
        let mut tensors = BTreeMap::new();
        let mut order = Vec::new();
        let mut recs = HashMap::new();
        for t in &capture.tensors {
            let optimizers = by_opt.get(&t.key).cloned().unwrap_or_default();
            let reached_in = reached.get(&t.key).cloned().unwrap_or_default();
            let (grad_norms, updates, changed) =
                match optimizers.first().and_then(|o| steps_of.get(o)) {
                    Some(steps) => timeline_from_steps(t.key, steps),
                    None => (
                        timeline_from_backwards(t.key, capture, &primary),
                        Vec::new(),
                        false,
                    ),
                };
            // A change too small for one step's float32 norm still shows over the run.
            let changed = changed
                || capture
                    .weight_changes
                    .iter()
                    .any(|(k, c)| *k == t.key && *c);
            let unstepped = !optimizers.is_empty()
                && optimizers.iter().all(|o| !steps_of.contains_key(o))
                && !changed;
            let never_stepped = unstepped
                && !cut_short
                && capture
                    .weight_changes
                    .iter()
                    .any(|(k, c)| *k == t.key && !*c);
            let by_hand_unchanged = capture.optimizers.is_empty()
                && !changed
                && capture
                    .weight_changes
                    .iter()
                    .any(|(k, c)| *k == t.key && !*c);
            let unchanged_by_hand = by_hand_unchanged && !cut_short;
            let step_not_reached = (unstepped || by_hand_unchanged) && cut_short;
            let weight_norm = optimizers
                .first()
                .and_then(|o| steps_of.get(o))
                .and_then(|steps| steps.last())
                .and_then(|s| s.weight_before.iter().find(|(k, _)| *k == t.key))
                .map(|(_, n)| *n);
            // A tensor on no model that an optimizer holds is a parameter of the script itself
            // once the run shows it used: reached by a backward, moved, or cut off by an op.
            let cut = capture.cuts.iter().any(|c| c.params.contains(&t.key));
            let free = t.kind == TensorKind::Foreign
                && !t.name.starts_with('<')
                && (!reached_in.is_empty() || changed || cut);
            let mut f = TensorFacts {
                key: t.key,
                optimizers,
                reached_in,
                grad_norms,
                updates,
                changed,
                never_stepped,
                step_not_reached,
                unchanged_by_hand,
                weight_norm,
                status: ParamStatus::GradNone,
                visible: (visible(t) || free) && !t.module.is_some_and(|m| uncalled.contains(&m)),
            };
            let cut_off = t.local_numel == Some(0) && cut;
            // A parameter a library turns off only for a moment: Lightning's
            // `toggle_optimizer` sets `requires_grad=False` on what the other optimizers hold
            // for one optimizer's step and restores it after, and observation may end inside
            // such a window (a GAN's generator during the discriminator's step). One the
            // library had already turned back on once while observed, or that got a gradient
            // and that an optimizer step changed, trains: its flag is read as it was when it
            // trained.
            let mut t = t.clone();
            if !t.requires_grad
                && t.library_freeze.as_ref().is_some_and(|l| {
                    l.unfrozen_at.is_none() && (l.toggled || (f.grad_nonzero() && f.changed))
                })
            {
                t.requires_grad = true;
                t.library_freeze = None;
                t.frozen_at = None;
            }
            f.status = status(&t, &f, any_optimizer_step, cut_off);
            order.push(t.key);
            tensors.insert(t.key, f);
            recs.insert(t.key, t);
        }
        Facts {
            steps_observed,
            any_optimizer_step,
            tensors,
            order,
            recs,
        }
    }

    /// A gradient at the level of float rounding against the rest of its module: at every
    /// observed step with a gradient, at most [`ROUNDING_EPSILONS`] machine epsilons of the
    /// largest gradient another parameter of the same module had at that step. What a sum that
    /// cancels exactly leaves behind (a bias before a BatchNorm: 1e-6 of the weight's gradient,
    /// varying run to run with the summation order), judged against the gradients it is summed
    /// with rather than against its own weight, whose size is arbitrary. Half-precision dtypes are
    /// left to [`TensorFacts::negligible_grad`] (their epsilon is too coarse for this).
    pub fn rounding_grad(&self, key: u64) -> bool {
        let (Some(t), Some(f)) = (self.rec(key), self.get(key)) else {
            return false;
        };
        let (Some(module), Some(eps)) = (t.module, epsilon(&t.dtype)) else {
            return false;
        };
        let siblings: Vec<&TensorFacts> = self
            .iter()
            .filter(|(s, _)| s.module == Some(module) && s.key != key)
            .map(|(_, sf)| sf)
            .collect();
        let mut judged = false;
        for (i, g) in f.grad_norms.iter().enumerate() {
            let Some(g) = g else { continue };
            let scale = siblings
                .iter()
                .filter_map(|s| s.grad_norms.get(i).copied().flatten())
                .filter(|n| n.is_finite())
                .fold(0.0f64, f64::max);
            if !g.is_finite() || scale == 0.0 || *g > scale * eps * ROUNDING_EPSILONS {
                return false;
            }
            judged = true;
        }
        judged
    }

    pub fn get(&self, key: u64) -> Option<&TensorFacts> {
        self.tensors.get(&key)
    }

    pub fn rec(&self, key: u64) -> Option<&TensorRec> {
        self.recs.get(&key)
    }

    /// Tracked tensors in capture order, with their facts.
    pub fn iter(&self) -> impl Iterator<Item = (&TensorRec, &TensorFacts)> {
        self.order
            .iter()
            .filter_map(|k| Some((self.recs.get(k)?, self.tensors.get(k)?)))
    }

    /// The report's parameter table.
    pub fn rows(&self) -> Vec<ParamRow> {
        self.iter()
            .filter(|(_, f)| f.visible)
            .map(|(t, f)| ParamRow {
                name: t.name.clone(),
                shape: t.shape.clone(),
                status: f.status,
                in_optimizer: Some(!f.optimizers.is_empty()),
                grad_norm: f
                    .grad_norms
                    .iter()
                    .map(|g| g.filter(|x| x.is_finite()))
                    .collect(),
                update_norm: f.updates.clone(),
                ranks: None,
            })
            .collect()
    }
}

/// Layers of a model whose own forward never ran while some of its layers did (the program
/// calls `model.encoder(x)` and `model.probe(z)` directly): those that never ran, below the
/// model itself, are not part of this program (a decoder an encoder-only script leaves out).
/// Parameters of the model itself stay: the loop may use them directly.
fn uncalled_layers(capture: &Capture) -> std::collections::HashSet<u64> {
    let by_key: HashMap<u64, &gradsleuth_model::capture::ModuleRec> =
        capture.modules.iter().map(|m| (m.key, m)).collect();
    let root_of = |m: &gradsleuth_model::capture::ModuleRec| m.root.unwrap_or(m.key);
    let driven: std::collections::HashSet<u64> = capture
        .modules
        .iter()
        .filter(|m| m.runs > 0 && m.parent.is_some())
        .map(root_of)
        .filter(|r| by_key.get(r).is_some_and(|r| r.runs == 0))
        .collect();
    let mut out = std::collections::HashSet::new();
    for m in &capture.modules {
        if m.parent.is_none() || !driven.contains(&root_of(m)) {
            continue;
        }
        // Did it, or a layer above it (below the model), run?
        let mut cur = Some(m);
        let mut ran = false;
        for _ in 0..256 {
            let Some(c) = cur.filter(|c| c.parent.is_some()) else {
                break;
            };
            if c.runs > 0 {
                ran = true;
                break;
            }
            cur = c.parent.and_then(|p| by_key.get(&p).copied());
        }
        if !ran {
            out.insert(m.key);
        }
    }
    out
}

fn visible(t: &TensorRec) -> bool {
    match t.kind {
        TensorKind::Param | TensorKind::Container | TensorKind::Orphan => true,
        TensorKind::Attribute => t.requires_grad,
        TensorKind::Buffer => t.requires_grad || t.is_parameter,
        TensorKind::Foreign | TensorKind::Hidden => false,
    }
}

fn timeline_from_steps(
    key: u64,
    steps: &[&gradsleuth_model::capture::StepRec],
) -> (Vec<Option<f64>>, Vec<Option<f64>>, bool) {
    let mut grads = Vec::new();
    let mut updates = Vec::new();
    let mut changed = false;
    for s in steps {
        let g = s
            .grad_norms
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, n)| decode(*n));
        grads.push(g);
        let before = s
            .weight_before
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, n)| *n);
        let after = s
            .weight_after
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, n)| *n);
        let u = match (before, after) {
            (Some(b), Some(a)) => {
                if a.to_bits() != b.to_bits() {
                    changed = true;
                }
                Some((a - b).abs())
            }
            _ => None,
        };
        updates.push(u);
    }
    (grads, updates, changed)
}

/// For tensors no optimizer holds: the gradient after the last backward before each primary
/// step (or after each backward when nothing stepped).
fn timeline_from_backwards(key: u64, capture: &Capture, primary: &[u64]) -> Vec<Option<f64>> {
    let norm_in = |b: &gradsleuth_model::capture::BackwardRec| {
        b.grad_norms
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, n)| decode(*n))
    };
    if primary.is_empty() {
        return capture.backwards.iter().map(norm_in).collect();
    }
    let mut out = Vec::with_capacity(primary.len());
    let mut lo = 0u64;
    for &hi in primary {
        let last = capture.backwards.iter().rfind(|b| b.seq > lo && b.seq < hi);
        out.push(last.and_then(norm_in));
        lo = hi;
    }
    out
}

fn status(t: &TensorRec, f: &TensorFacts, any_step: bool, cut_off: bool) -> ParamStatus {
    if t.kind == TensorKind::Buffer {
        return ParamStatus::Unregistered;
    }
    if !t.requires_grad {
        return ParamStatus::Frozen;
    }
    if t.local_numel == Some(0) {
        // An FSDP shard with no elements on this rank: its gradient and update live on the
        // ranks holding its elements (the merge uses theirs). Only this rank's own backward
        // speaks: a parameter a cut of the op-level step cut off, which no gradient reached
        // then, gets none on any rank (every rank runs the whole forward).
        return if cut_off && !f.reached() {
            ParamStatus::GradNone
        } else {
            ParamStatus::Learning
        };
    }
    if !t.is_leaf {
        return ParamStatus::NonLeaf;
    }
    if matches!(
        t.kind,
        TensorKind::Container | TensorKind::Attribute | TensorKind::Orphan
    ) {
        return ParamStatus::Unregistered;
    }
    if f.grad_norms
        .iter()
        .any(|g| matches!(g, Some(n) if !n.is_finite()))
    {
        return ParamStatus::Nan;
    }
    let seen = f.grad_norms.iter().any(Option::is_some);
    if f.grad_nonzero() {
        if !any_step {
            // No optimizer stepped: a manual update may train it, unless the optimizers that
            // hold it never stepped (or there is none) and nothing changed it.
            return if f.never_stepped || f.unchanged_by_hand || f.step_not_reached {
                ParamStatus::NotUpdated
            } else {
                ParamStatus::Learning
            };
        }
        return if f.changed {
            ParamStatus::Learning
        } else {
            ParamStatus::NotUpdated
        };
    }
    if f.reached() && !seen && any_step {
        // A backward accumulated into it, but no step saw a gradient: cleared or skipped,
        // unless the steps changed it anyway (DeepSpeed's ZeRO moves each gradient into its
        // flat partition during backward and updates that: `.grad` is None by design).
        return if f.changed {
            ParamStatus::Learning
        } else {
            ParamStatus::NotUpdated
        };
    }
    if seen || f.reached() {
        return ParamStatus::GradZero;
    }
    ParamStatus::GradNone
}

#[cfg(test)]
mod tests {
    use crate::checks::testing::Scenario;
    use gradsleuth_model::capture::ModuleKind;
    use gradsleuth_model::Location;

    /// `AutoEncoder` whose forward never runs: the loop calls `encoder` and `probe` directly,
    /// never `decoder`; `scale` belongs to the model itself.
    #[test]
    fn layers_a_program_never_calls_of_a_model_it_drives_layer_by_layer_are_not_shown() {
        let mut s = Scenario::new();
        s.module(1, "AutoEncoder", "", None, ModuleKind::Root, 0);
        s.module(
            2,
            "Sequential",
            "encoder",
            Some(1),
            ModuleKind::Registered,
            3,
        );
        s.module(3, "Linear", "encoder.0", Some(2), ModuleKind::Registered, 3);
        s.module(
            4,
            "Sequential",
            "decoder",
            Some(1),
            ModuleKind::Registered,
            0,
        );
        s.module(5, "Linear", "decoder.0", Some(4), ModuleKind::Registered, 0);
        s.module(6, "Linear", "probe", Some(1), ModuleKind::Registered, 3);
        s.param(10, "encoder.0.weight", 3);
        s.param(11, "decoder.0.weight", 5);
        s.param(12, "probe.weight", 6);
        s.param(13, "scale", 1);
        s.optimizer(100, &[10], Some(Location::new("train.py", 20)));
        let facts = super::Facts::derive(&s.capture);
        let shown: Vec<u64> = facts
            .iter()
            .filter(|(_, f)| f.visible)
            .map(|(t, _)| t.key)
            .collect();
        assert_eq!(shown, vec![10, 12, 13]);
        // A model whose forward runs shows every layer, called or not.
        s.capture.modules[0].runs = 3;
        let facts = super::Facts::derive(&s.capture);
        assert_eq!(facts.iter().filter(|(_, f)| f.visible).count(), 4);
    }
}
