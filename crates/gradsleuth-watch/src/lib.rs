//! `gradsleuth watch`: gradient health for a whole training run, in bounded memory.
//!
//! The Python side computes, once per optimizer step, one fused `torch._foreach_norm` over the
//! gradients (and, every `update_every` steps, over the updates) on the tensors' own device and
//! hands the numbers to a [`Monitor`]. Everything else is here:
//!
//! * aggregation: per parameter a running [`SeriesSummary`] (count, none, zero, non-finite, min,
//!   max, mean, last), per layer (the module owning the parameters) a history of at most
//!   [`series::MAX_BUCKETS`] buckets whose width doubles as the run grows ([`series::History`]);
//! * detectors ([`Monitor::grads`]): non-finite gradients, exploding layers (a norm far above
//!   the layer's running median, or above an absolute bound), vanishing layers (far below the
//!   largest layer, sustained), dead layers (exactly zero from the start, sustained),
//!   parameters that stop learning mid-run (no or zero gradient after having had one,
//!   sustained), GradScaler skip storms; thresholds in [`WatchThresholds`], documented with
//!   their reasoning in `docs/watch.md`;
//! * a TensorBoard event-file writer ([`tensorboard`]);
//! * the record kept in the capture ([`Monitor::record`]), from which the analysis makes
//!   findings and the renderers draw the gradient-flow chart.

pub mod late;
pub mod series;
pub mod singular;
pub mod tensorboard;

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use gradsleuth_model::capture::{
    NanTrace, SeriesSummary, WatchEvent, WatchEventKind, WatchLayer, WatchParam, WatchRec,
    WatchThresholds,
};
use series::{observe, History};

pub use gradsleuth_model::capture::WatchThresholds as Thresholds;

/// What a step's numbers changed: the caller arms deeper capture on `first_nonfinite`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The first step with a non-finite gradient (indices of those parameters).
    pub first_nonfinite: Vec<usize>,
    /// Kinds of anomalies that started at this step.
    pub new_anomalies: Vec<String>,
    /// Every parameter whose gradient is non-finite at this step.
    pub nonfinite: Vec<usize>,
}

#[derive(Debug, Default, Clone)]
struct LayerState {
    name: String,
    params: Vec<usize>,
    history: History,
    /// Running estimate of ln(norm) (an exponential moving average: a robust "usual size").
    log_ema: Option<f64>,
    below_streak: u64,
    zero_streak: u64,
    ever_nonzero: bool,
}

#[derive(Debug, Default, Clone)]
struct ParamState {
    summary: WatchParam,
    quiet_streak: u64,
}

/// The monitor of one run.
pub struct Monitor {
    pub thresholds: WatchThresholds,
    params: Vec<ParamState>,
    layers: Vec<LayerState>,
    steps: u64,
    events: Vec<WatchEvent>,
    /// (kind, name) -> index of its open event
    open: HashMap<(WatchEventKind, String), usize>,
    scaler: VecDeque<bool>,
    scaler_total: (u64, u64),
    nan: Option<NanTrace>,
    tb: Option<tensorboard::EventWriter>,
    tb_error: Option<String>,
    deep: Vec<gradsleuth_model::Finding>,
}

impl Monitor {
    /// `params`: (parameter name, layer name) in the order the norms will come.
    pub fn new(params: Vec<(String, String)>, thresholds: WatchThresholds) -> Monitor {
        let mut layer_index: HashMap<String, usize> = HashMap::new();
        let mut layers: Vec<LayerState> = Vec::new();
        let mut ps = Vec::with_capacity(params.len());
        for (i, (name, layer)) in params.into_iter().enumerate() {
            let li = *layer_index.entry(layer.clone()).or_insert_with(|| {
                layers.push(LayerState {
                    name: layer.clone(),
                    ..Default::default()
                });
                layers.len() - 1
            });
            layers[li].params.push(i);
            ps.push(ParamState {
                summary: WatchParam {
                    name,
                    layer,
                    ..Default::default()
                },
                quiet_streak: 0,
            });
        }
        Monitor {
            thresholds,
            params: ps,
            layers,
            steps: 0,
            events: Vec::new(),
            open: HashMap::new(),
            scaler: VecDeque::new(),
            scaler_total: (0, 0),
            nan: None,
            tb: None,
            tb_error: None,
            deep: Vec::new(),
        }
    }

    /// Writes TensorBoard scalars to `dir` from now on.
    pub fn tensorboard(&mut self, dir: &Path) -> Result<String, String> {
        let w = tensorboard::EventWriter::create(dir)
            .map_err(|e| format!("cannot write TensorBoard events in {}: {e}", dir.display()))?;
        let path = w.path().display().to_string();
        self.tb = Some(w);
        Ok(path)
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    pub fn param_count(&self) -> usize {
        self.params.len()
    }

    fn event(
        &mut self,
        kind: WatchEventKind,
        name: &str,
        step: u64,
        value: Option<f64>,
        detail: String,
    ) -> bool {
        let key = (kind, name.to_owned());
        if let Some(&i) = self.open.get(&key) {
            self.events[i].until = step;
            return false;
        }
        self.open.insert(key, self.events.len());
        self.events.push(WatchEvent {
            kind,
            step,
            until: step,
            names: vec![name.to_owned()],
            value,
            detail,
        });
        true
    }

    fn close(&mut self, kind: WatchEventKind, name: &str) {
        self.open.remove(&(kind, name.to_owned()));
    }

    /// One optimizer step's gradient norms, in the order given to [`Monitor::new`]
    /// (`None`: the parameter had no gradient).
    pub fn grads(&mut self, norms: &[Option<f64>]) -> Verdict {
        self.steps += 1;
        let step = self.steps;
        let t = self.thresholds.clone();
        let mut verdict = Verdict::default();
        let mut nonfinite = Vec::new();
        for (i, p) in self.params.iter_mut().enumerate() {
            let v = norms.get(i).copied().flatten();
            observe(&mut p.summary.grad_norm, v);
            match v {
                Some(x) if !x.is_finite() => {
                    nonfinite.push(i);
                    p.summary.first_nonfinite_step.get_or_insert(step);
                }
                Some(x) if x > 0.0 => {
                    p.summary.last_nonzero_step = Some(step);
                    p.quiet_streak = 0;
                }
                _ => p.quiet_streak += 1,
            }
        }
        verdict.nonfinite = nonfinite.clone();
        if !nonfinite.is_empty() {
            let first = self.nan.is_none()
                && !self
                    .events
                    .iter()
                    .any(|e| e.kind == WatchEventKind::Nonfinite);
            let names: Vec<String> = nonfinite
                .iter()
                .map(|&i| self.params[i].summary.name.clone())
                .collect();
            if first {
                verdict.first_nonfinite = nonfinite.clone();
                verdict
                    .new_anomalies
                    .push(WatchEventKind::Nonfinite.as_str().into());
                self.events.push(WatchEvent {
                    kind: WatchEventKind::Nonfinite,
                    step,
                    until: step,
                    names,
                    value: None,
                    detail: format!("{} parameter(s) got a NaN/Inf gradient", nonfinite.len()),
                });
            } else if let Some(e) = self
                .events
                .iter_mut()
                .find(|e| e.kind == WatchEventKind::Nonfinite)
            {
                e.until = step;
            }
        }
        // Parameters that had a gradient and then stopped getting one.
        let mut stopped = Vec::new();
        for p in &self.params {
            if p.quiet_streak == t.patience && p.summary.last_nonzero_step.is_some() {
                stopped.push((
                    p.summary.name.clone(),
                    p.summary.last_nonzero_step.unwrap_or(0),
                ));
            }
        }
        for (name, last) in stopped {
            if self.event(
                WatchEventKind::Stopped,
                &name,
                step,
                None,
                format!("last non-zero gradient at step {last}"),
            ) {
                verdict
                    .new_anomalies
                    .push(WatchEventKind::Stopped.as_str().into());
            }
        }
        // Layers.
        let mut layer_norms: Vec<Option<f64>> = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            let mut any = false;
            let mut sq = 0.0;
            for &i in &l.params {
                if let Some(v) = norms.get(i).copied().flatten() {
                    any = true;
                    sq += v * v;
                }
            }
            layer_norms.push(any.then(|| sq.sqrt()));
        }
        let largest = layer_norms
            .iter()
            .flatten()
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let mut tb: Vec<(String, f32)> = Vec::new();
        let total: f64 = layer_norms
            .iter()
            .flatten()
            .map(|v| v * v)
            .sum::<f64>()
            .sqrt();
        tb.push(("grad_norm/total".into(), total as f32));
        for (li, &v) in layer_norms.iter().enumerate() {
            let name = self.layers[li].name.clone();
            self.layers[li].history.push(step, v);
            if step % 10 == 1 || step <= 10 {
                if let Some(v) = v {
                    tb.push((
                        format!(
                            "grad_norm/{}",
                            if name.is_empty() { "(root)" } else { &name }
                        ),
                        v as f32,
                    ));
                }
            }
            let Some(v) = v.filter(|v| v.is_finite()) else {
                continue;
            };
            let l = &mut self.layers[li];
            // Dead: exactly zero, never anything else.
            if v == 0.0 {
                l.zero_streak += 1;
            } else {
                l.zero_streak = 0;
                l.ever_nonzero = true;
            }
            let dead = l.zero_streak >= t.patience && !l.ever_nonzero;
            // Vanishing: far below the largest layer, sustained.
            let below = largest > 0.0 && v < t.vanish_ratio * largest && v > 0.0;
            l.below_streak = if below { l.below_streak + 1 } else { 0 };
            let vanishing = step > t.warmup && l.below_streak >= t.patience;
            // Exploding: far above its own usual size, or above an absolute bound.
            let usual = l.log_ema.map(f64::exp);
            let exploding = (step > t.warmup
                && usual.is_some_and(|u| u > 0.0 && v > t.explode_factor * u))
                || v > t.explode_abs;
            if v > 0.0 && !exploding {
                let lv = v.ln();
                l.log_ema = Some(match l.log_ema {
                    None => lv,
                    Some(e) => e + 0.05 * (lv - e),
                });
            }
            if dead {
                if self.event(
                    WatchEventKind::Dead,
                    &name,
                    step,
                    Some(0.0),
                    "gradient exactly zero in every step so far".into(),
                ) {
                    verdict
                        .new_anomalies
                        .push(WatchEventKind::Dead.as_str().into());
                }
            } else {
                self.close(WatchEventKind::Dead, &name);
            }
            if vanishing {
                let detail = format!(
                    "below {:.0e} × the largest layer's gradient norm",
                    t.vanish_ratio
                );
                if self.event(WatchEventKind::Vanishing, &name, step, Some(v), detail) {
                    verdict
                        .new_anomalies
                        .push(WatchEventKind::Vanishing.as_str().into());
                }
            } else {
                self.close(WatchEventKind::Vanishing, &name);
            }
            if exploding {
                let detail = match usual {
                    Some(u) if v <= t.explode_abs => {
                        format!("{:.1}× its usual norm {u:.3e}", v / u)
                    }
                    _ => format!("above the absolute bound {:.0e}", t.explode_abs),
                };
                if self.event(WatchEventKind::Exploding, &name, step, Some(v), detail) {
                    verdict
                        .new_anomalies
                        .push(WatchEventKind::Exploding.as_str().into());
                }
            } else {
                self.close(WatchEventKind::Exploding, &name);
            }
        }
        if let Some(w) = &mut self.tb {
            let refs: Vec<(&str, f32)> = tb.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            if let Err(e) = w.scalars(step, &refs) {
                self.tb_error.get_or_insert_with(|| e.to_string());
            }
        }
        verdict
    }

    /// Update-to-weight ratios (‖Δw‖/‖w‖) measured at the current step, same order.
    pub fn updates(&mut self, ratios: &[Option<f64>]) {
        let step = self.steps.max(1);
        let mut tb: Vec<(String, f32)> = Vec::new();
        for (i, p) in self.params.iter_mut().enumerate() {
            if let Some(r) = ratios.get(i).copied().flatten() {
                observe(&mut p.summary.update_ratio, Some(r));
            }
        }
        for l in &mut self.layers {
            let rs: Vec<f64> = l
                .params
                .iter()
                .filter_map(|&i| ratios.get(i).copied().flatten())
                .filter(|r| r.is_finite())
                .collect();
            if !rs.is_empty() {
                let mean = rs.iter().sum::<f64>() / rs.len() as f64;
                l.history.push_ratio(step, mean);
                tb.push((
                    format!(
                        "update_ratio/{}",
                        if l.name.is_empty() { "(root)" } else { &l.name }
                    ),
                    mean as f32,
                ));
            }
        }
        if let Some(w) = &mut self.tb {
            let refs: Vec<(&str, f32)> = tb.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            let _ = w.scalars(step, &refs);
        }
    }

    /// A GradScaler step: did it skip the optimizer step (inf/NaN gradients)?
    pub fn scaler(&mut self, skipped: bool) -> bool {
        let t = self.thresholds.clone();
        self.scaler_total.0 += 1;
        self.scaler_total.1 += u64::from(skipped);
        self.scaler.push_back(skipped);
        while self.scaler.len() as u64 > t.scaler_window {
            self.scaler.pop_front();
        }
        let n = self.scaler.len() as u64;
        // The first window is the scale's own calibration (a few skips are normal there).
        if self.scaler_total.0 <= t.scaler_window || n < t.scaler_window {
            return false;
        }
        let frac = self.scaler.iter().filter(|s| **s).count() as f64 / n as f64;
        let step = self.steps.max(1);
        if frac >= t.scaler_skip_fraction {
            let detail = format!(
                "GradScaler skipped {:.0}% of the last {n} steps",
                frac * 100.0
            );
            return self.event(
                WatchEventKind::ScalerStorm,
                "GradScaler",
                step,
                Some(frac),
                detail,
            );
        }
        self.close(WatchEventKind::ScalerStorm, "GradScaler");
        false
    }

    /// The report of an op-level step that the anomaly `kind` at `step` armed: its findings
    /// about cuts and zero gradients (warnings and errors) join the record, marked with what
    /// armed them.
    pub fn add_deep(&mut self, report: &gradsleuth_model::Report, kind: &str, step: u64) {
        use gradsleuth_model::{Category as C, Severity};
        const ZEROS: &[C] = &[
            C::DeadPath,
            C::GradClip,
            C::GradHook,
            C::CreateGraph,
            C::LossRewrap,
            C::Unused,
        ];
        for f in &report.findings {
            let about = C::CUTS.contains(&f.category) || ZEROS.contains(&f.category);
            if f.severity >= Severity::Warning && about {
                let mut f = f.clone();
                f.message = format!(
                    "(op-level step armed by `{kind}` at step {step}) {}",
                    f.message
                );
                f.steps = vec![step as u32 + 1];
                f.id = String::new();
                self.deep.push(f);
            }
        }
    }

    /// The result of tracing the first non-finite gradient.
    pub fn set_nan(&mut self, nan: NanTrace) {
        self.nan = Some(nan);
    }

    /// Number of anomaly episodes so far.
    pub fn anomalies(&self) -> usize {
        self.events.len()
    }

    /// `step 1234 · 2 anomalies (nonfinite@17, exploding@40)`.
    pub fn status_line(&self) -> String {
        let mut s = format!("gradsleuth watch · step {} · ", self.steps);
        if self.events.is_empty() {
            s.push_str("no anomalies");
        } else {
            let kinds: Vec<String> = self
                .events
                .iter()
                .take(3)
                .map(|e| format!("{}@{}", e.kind.as_str(), e.step))
                .collect();
            s.push_str(&format!(
                "{} anomal{} ({}{})",
                self.events.len(),
                if self.events.len() == 1 { "y" } else { "ies" },
                kinds.join(", "),
                if self.events.len() > 3 { ", ..." } else { "" }
            ));
        }
        s
    }

    /// What goes into the capture.
    pub fn record(&mut self) -> WatchRec {
        let mut tensorboard = None;
        if let Some(w) = &mut self.tb {
            let _ = w.flush();
            tensorboard = Some(w.path().display().to_string());
        }
        WatchRec {
            steps: self.steps,
            thresholds: self.thresholds.clone(),
            params: self.params.iter().map(|p| p.summary.clone()).collect(),
            layers: self
                .layers
                .iter()
                .map(|l| WatchLayer {
                    name: l.name.clone(),
                    stride: l.history.stride,
                    buckets: l.history.buckets(),
                })
                .collect(),
            events: self.events.clone(),
            scaler: (self.scaler_total.0 > 0).then_some(self.scaler_total),
            nan: self.nan.clone(),
            tensorboard,
            deep: self.deep.clone(),
        }
    }
}

/// One record for several monitors (one per optimizer: a GAN's generator and discriminator).
pub fn combine(records: Vec<WatchRec>) -> WatchRec {
    let mut it = records.into_iter();
    let Some(mut out) = it.next() else {
        return WatchRec::default();
    };
    for r in it {
        out.steps = out.steps.max(r.steps);
        out.params.extend(r.params);
        out.layers.extend(r.layers);
        out.events.extend(r.events);
        out.scaler = match (out.scaler, r.scaler) {
            (Some(a), Some(b)) => Some((a.0 + b.0, a.1 + b.1)),
            (a, b) => a.or(b),
        };
        if out.nan.is_none() {
            out.nan = r.nan;
        }
        if out.tensorboard.is_none() {
            out.tensorboard = r.tensorboard;
        }
        out.deep.extend(r.deep);
    }
    out
}

/// A summary's finite mean, or None.
pub fn mean(s: &SeriesSummary) -> Option<f64> {
    s.mean
}

#[cfg(test)]
mod tests {
    use super::*;

    fn monitor() -> Monitor {
        Monitor::new(
            vec![
                ("enc.weight".into(), "enc".into()),
                ("enc.bias".into(), "enc".into()),
                ("head.weight".into(), "head".into()),
            ],
            WatchThresholds::default(),
        )
    }

    #[test]
    fn a_first_nan_is_reported_once_and_arms_tracing() {
        let mut m = monitor();
        for _ in 0..5 {
            assert_eq!(
                m.grads(&[Some(1.0), Some(0.5), Some(2.0)]),
                Verdict::default()
            );
        }
        let v = m.grads(&[Some(f64::NAN), Some(0.5), Some(f64::INFINITY)]);
        assert_eq!(v.first_nonfinite, vec![0, 2]);
        let again = m.grads(&[Some(f64::NAN), Some(0.5), Some(2.0)]);
        assert!(again.first_nonfinite.is_empty());
        let rec = m.record();
        let e = rec
            .events
            .iter()
            .find(|e| e.kind == WatchEventKind::Nonfinite)
            .unwrap();
        assert_eq!((e.step, e.until), (6, 7));
        assert_eq!(e.names, vec!["enc.weight", "head.weight"]);
        assert_eq!(rec.params[0].first_nonfinite_step, Some(6));
    }

    #[test]
    fn an_exploding_layer_is_caught_after_warmup_but_noise_is_not() {
        let mut m = monitor();
        for i in 0..30 {
            let wobble = 1.0 + 0.3 * ((i % 5) as f64 - 2.0) / 2.0;
            assert!(m
                .grads(&[Some(wobble), Some(0.1), Some(2.0 * wobble)])
                .new_anomalies
                .is_empty());
        }
        let v = m.grads(&[Some(1.0), Some(0.1), Some(900.0)]);
        assert_eq!(v.new_anomalies, vec!["exploding"]);
        let rec = m.record();
        assert_eq!(rec.events[0].names, vec!["head"]);
        assert_eq!(rec.events[0].step, 31);
    }

    #[test]
    fn stopped_dead_and_vanishing_need_patience() {
        let t = WatchThresholds::default();
        let mut m = monitor();
        for _ in 0..5 {
            m.grads(&[Some(1.0), Some(1.0), Some(1.0)]);
        }
        // head stops getting a gradient (its branch no longer runs).
        for _ in 0..t.patience {
            m.grads(&[Some(1.0), Some(1.0), None]);
        }
        let rec = m.record();
        let stopped: Vec<&WatchEvent> = rec
            .events
            .iter()
            .filter(|e| e.kind == WatchEventKind::Stopped)
            .collect();
        assert_eq!(stopped.len(), 1);
        assert_eq!(stopped[0].names, vec!["head.weight"]);
        assert_eq!(stopped[0].step, 5 + t.patience);

        let mut m = monitor();
        for _ in 0..t.patience - 1 {
            m.grads(&[Some(1.0), Some(1.0), Some(0.0)]);
        }
        assert!(m.record().events.is_empty());
        m.grads(&[Some(1.0), Some(1.0), Some(0.0)]);
        assert_eq!(m.record().events[0].kind, WatchEventKind::Dead);

        let mut m = monitor();
        for _ in 0..(t.warmup + t.patience) {
            m.grads(&[Some(1.0), Some(1.0), Some(1e-12)]);
        }
        assert!(m
            .record()
            .events
            .iter()
            .any(|e| e.kind == WatchEventKind::Vanishing && e.names == ["head"]));
    }

    #[test]
    fn scaler_storms_after_calibration_only() {
        let mut m = monitor();
        // Calibration: the first window skips a lot (normal).
        for i in 0..20 {
            m.grads(&[Some(1.0), Some(1.0), Some(1.0)]);
            assert!(!m.scaler(i < 8));
        }
        let mut fired = false;
        for _ in 0..20 {
            m.grads(&[Some(1.0), Some(1.0), Some(1.0)]);
            fired |= m.scaler(true);
        }
        assert!(fired);
        let rec = m.record();
        assert_eq!(rec.scaler, Some((40, 28)));
        assert!(rec
            .events
            .iter()
            .any(|e| e.kind == WatchEventKind::ScalerStorm));
    }

    #[test]
    fn memory_is_bounded_for_long_runs() {
        let names: Vec<(String, String)> = (0..50)
            .map(|i| (format!("l{i}.weight"), format!("l{i}")))
            .collect();
        let mut m = Monitor::new(names, WatchThresholds::default());
        let norms: Vec<Option<f64>> = (0..50).map(|i| Some(1.0 + i as f64)).collect();
        for _ in 0..20_000 {
            m.grads(&norms);
        }
        let rec = m.record();
        assert_eq!(rec.steps, 20_000);
        assert!(rec
            .layers
            .iter()
            .all(|l| l.buckets.len() <= series::MAX_BUCKETS));
        assert!(rec.events.is_empty());
    }
}
