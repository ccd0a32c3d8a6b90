//! The capture buffer the tracer's hooks write into.
//!
//! Identities are integer keys, never tensors, so the capture keeps nothing alive. Locations
//! get their snippet and a cwd-relative path as they arrive, so a saved capture renders
//! anywhere. Every method is an event the tracer saw; none reads Python.

use std::collections::HashMap;
use std::path::PathBuf;

use gradsleuth_model::capture::*;
use gradsleuth_model::{Capture, Category, Location, Related};
use gradsleuth_source::SourceCache;

use crate::site::Site;

/// A source position as the tracer read it from a frame: file, line, function (each may be
/// missing: no user frame).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct At {
    pub file: Option<String>,
    pub line: Option<u32>,
    pub function: Option<String>,
}

impl At {
    pub fn new(file: &str, line: u32, function: Option<&str>) -> At {
        At {
            file: Some(file.to_owned()),
            line: Some(line),
            function: function.map(str::to_owned),
        }
    }
}

impl From<&Site> for At {
    fn from(s: &Site) -> At {
        At::new(&s.file, s.line, Some(&s.function))
    }
}

/// A module as the tracer describes it.
#[derive(Clone, Debug, Default)]
pub struct ModuleInfo {
    pub key: u64,
    pub class: String,
    pub root: Option<u64>,
    pub name: String,
    pub parent: Option<u64>,
    pub attr: String,
    pub kind: ModuleKind,
    pub class_def: At,
    pub forward_def: At,
}

/// A tensor as the tracer describes it.
#[derive(Clone, Debug, Default)]
pub struct TensorInfo {
    pub key: u64,
    pub name: String,
    pub kind: TensorKind,
    pub module: Option<u64>,
    pub attr: String,
    pub shape: Vec<i64>,
    pub dtype: String,
    pub requires_grad: bool,
    pub is_leaf: bool,
    pub is_parameter: bool,
    pub chain: Vec<String>,
    pub leaf: Option<u64>,
}

/// (class identity, file, line) of a call that built a module in a forward.
type OrphanSite = (u64, Option<String>, Option<u32>);

/// Op digests kept per probe run: a step of a large model calls tens of thousands of ops;
/// the first difference is almost always early.
pub const OP_DIGEST_LIMIT: usize = 200_000;

/// The capture buffer.
pub struct Recorder {
    pub capture: Capture,
    seq: u64,
    modules: HashMap<u64, usize>,
    tensors: HashMap<u64, usize>,
    optimizers: HashMap<u64, usize>,
    /// Index of the backward in progress.
    current_backward: Option<usize>,
    source: SourceCache,
    cwd: Option<PathBuf>,
    /// Modules built in a forward, grouped by (class identity, file, line) of the call: the
    /// group's key.
    orphan_groups: HashMap<OrphanSite, u64>,
    /// Each group's prefix for its parameters' names (`Linear@train.py:31`).
    orphan_prefixes: HashMap<u64, String>,
    /// Where each tensor's `requires_grad` was set to False (tensors not recorded yet included).
    frozen: HashMap<u64, Location>,
    /// Tensors an installed library's code froze, as [`TensorRec::library_freeze`] records.
    library_frozen: HashMap<u64, LibraryFreeze>,
    /// Tensors a library's code set back to True after freezing them: the package, and how
    /// many backwards had run then.
    library_restored: HashMap<u64, (String, usize)>,
    /// The user's line that last entered `torch.inference_mode()` while observing: the block
    /// an inference tensor refused later was most likely made in, when the op log did not see
    /// it made (before the op-level window opened).
    pub inference_block: Option<Site>,
    /// Which module holds which (the registration hook's links).
    pub holders: crate::holders::Holders,
    /// A probe run (`gradsleuth bisect`): record losses and op digests.
    pub probe: bool,
}

impl Recorder {
    pub fn new(command: &str, steps: u32, script: Option<String>, argv: Vec<String>) -> Self {
        let mut capture = Capture {
            command: command.to_owned(),
            steps_requested: steps,
            ..Default::default()
        };
        capture.target.script = script;
        capture.target.argv = argv;
        Recorder {
            capture,
            seq: 0,
            modules: HashMap::new(),
            tensors: HashMap::new(),
            optimizers: HashMap::new(),
            frozen: HashMap::new(),
            library_frozen: HashMap::new(),
            library_restored: HashMap::new(),
            inference_block: None,
            current_backward: None,
            source: SourceCache::new(),
            cwd: std::env::current_dir().ok(),
            orphan_groups: HashMap::new(),
            orphan_prefixes: HashMap::new(),
            holders: Default::default(),
            probe: false,
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// A location with its snippet, relative to the working directory when under it.
    pub fn loc(&mut self, at: &At) -> Option<Location> {
        let file = at.file.as_deref()?;
        let line = at.line?;
        let mut loc = self.source.location(file, line);
        loc.function = at.function.clone();
        if let Some(cwd) = &self.cwd {
            if let Ok(rel) = std::path::Path::new(file).strip_prefix(cwd) {
                loc.file = rel.to_string_lossy().into_owned();
            }
        }
        Some(loc)
    }

    /// A user frame as a location.
    pub fn site_location(&mut self, site: &Site) -> Option<Location> {
        self.loc(&At::from(site))
    }

    fn module_mut(&mut self, key: u64) -> Option<&mut ModuleRec> {
        let i = *self.modules.get(&key)?;
        self.capture.modules.get_mut(i)
    }

    pub fn set_env(
        &mut self,
        torch_version: Option<String>,
        python_version: Option<String>,
        device: Option<String>,
    ) {
        self.capture.environment = Environment {
            torch_version,
            python_version,
            device,
        };
    }

    /// Adds or updates a module (run counts are kept on update).
    pub fn module(&mut self, m: ModuleInfo) {
        let class_def = self.loc(&m.class_def);
        let forward_def = self.loc(&m.forward_def);
        if let Some(r) = self.module_mut(m.key) {
            r.class = m.class;
            r.root = m.root;
            r.name = m.name;
            r.parent = m.parent;
            r.attr = m.attr;
            r.kind = m.kind;
            r.class_def = class_def.or(r.class_def.take());
            r.forward_def = forward_def.or(r.forward_def.take());
            return;
        }
        self.modules.insert(m.key, self.capture.modules.len());
        self.capture.modules.push(ModuleRec {
            key: m.key,
            class: m.class,
            root: m.root,
            name: m.name,
            parent: m.parent,
            attr: m.attr,
            kind: m.kind,
            class_def,
            forward_def,
            ..Default::default()
        });
    }

    /// A module ran (counted once per root call by the tracer); `stateless`: on tensors put in
    /// place of its own parameters.
    pub fn module_ran(&mut self, key: u64, grad_enabled: bool, stateless: bool) {
        if let Some(m) = self.module_mut(key) {
            m.runs += 1;
            if !grad_enabled {
                m.runs_no_grad += 1;
            }
            if stateless {
                m.runs_stateless += 1;
            }
        }
    }

    pub fn root_call(&mut self) {
        self.capture.root_calls += 1;
    }

    /// A sharded tensor (DTensor): how many elements this rank holds.
    pub fn tensor_shard(&mut self, key: u64, local_numel: u64) {
        if let Some(&i) = self.tensors.get(&key) {
            self.capture.tensors[i].local_numel = Some(local_numel);
        }
    }

    /// Where a module was first called from (the line in its parent's forward).
    pub fn module_site(&mut self, key: u64, site: &At) {
        if self.module_mut(key).is_some_and(|m| m.first_call.is_none()) {
            let loc = self.loc(site);
            if let Some(m) = self.module_mut(key) {
                m.first_call = loc;
            }
        }
    }

    /// One observed iteration took `seconds` (op level or hooks only).
    pub fn step_time(&mut self, seconds: f64, op_level: bool) {
        if self.capture.step_seconds.len() < 10_000 && seconds.is_finite() && seconds >= 0.0 {
            self.capture
                .step_seconds
                .push(StepTime { seconds, op_level });
        }
    }

    /// A process started with `target` (a function of `module`) by `method` at `site`, one
    /// record per target and line. DataLoader workers (torch's own loop) are not the user's
    /// training: left out.
    pub fn child_process(&mut self, target: String, module: &str, method: String, site: &At) {
        if module.starts_with("torch.utils.data") {
            return;
        }
        let location = self.loc(site);
        if let Some(c) = self
            .capture
            .children
            .iter_mut()
            .find(|c| c.target == target && c.location == location)
        {
            c.count += 1;
            return;
        }
        if self.capture.children.len() < 100 {
            self.capture.children.push(ChildRec {
                target,
                method,
                count: 1,
                location,
            });
        }
    }

    /// Stores the watch record (the command becomes `watch`).
    pub fn set_watch(&mut self, record: WatchRec) {
        self.capture.watch = Some(record);
        self.capture.command = "watch".into();
    }

    /// Distributed: this process's rank in its job.
    pub fn set_dist(&mut self, dist: DistInfo) {
        self.capture.dist = Some(dist);
    }

    /// The phase the script is in (see `Progress`).
    pub fn progress(&mut self, step: u32, phase: Phase) {
        self.capture.progress = Some(Progress { step, phase });
    }

    /// A module running inside a model's forward that belongs to no scanned model, called at
    /// `site`: modules of one class built at one call site are one group (a layer rebuilt on
    /// every forward is one module, not one per step). Returns the group's key and whether the
    /// group is new (its parameters are then added with [`Recorder::orphan_param`]).
    #[allow(clippy::too_many_arguments)]
    pub fn orphan(
        &mut self,
        key: u64,
        class_id: u64,
        class: &str,
        site: &At,
        parent: Option<u64>,
        class_def: &At,
        forward_def: &At,
    ) -> (u64, bool) {
        let group = (class_id, site.file.clone(), site.line);
        if let Some(&okey) = self.orphan_groups.get(&group) {
            return (okey, false);
        }
        let base = site
            .file
            .as_deref()
            .map(|f| {
                std::path::Path::new(f)
                    .file_name()
                    .map_or(f.to_owned(), |b| b.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "?".into());
        let line = site.line.map_or("None".to_owned(), |l| l.to_string());
        self.orphan_groups.insert(group, key);
        self.orphan_prefixes
            .insert(key, format!("{class}@{base}:{line}"));
        self.module(ModuleInfo {
            key,
            class: class.to_owned(),
            root: None,
            name: format!("<{class} built in forward>"),
            parent,
            attr: String::new(),
            kind: ModuleKind::Orphan,
            class_def: class_def.clone(),
            forward_def: forward_def.clone(),
        });
        (key, true)
    }

    /// A parameter of the orphan group `group`, named by the group's call site.
    #[allow(clippy::too_many_arguments)]
    pub fn orphan_param(
        &mut self,
        group: u64,
        key: u64,
        attr: &str,
        shape: Vec<i64>,
        dtype: String,
        requires_grad: bool,
        is_leaf: bool,
    ) {
        let Some(prefix) = self.orphan_prefixes.get(&group).cloned() else {
            return;
        };
        self.tensor(TensorInfo {
            key,
            name: format!("{prefix}.{attr}"),
            kind: TensorKind::Orphan,
            module: Some(group),
            attr: attr.to_owned(),
            shape,
            dtype,
            requires_grad,
            is_leaf,
            is_parameter: true,
            chain: Vec::new(),
            leaf: None,
        });
    }

    /// The orphan group `group` turned out to be registered in a model as `path` (a layer
    /// assigned to `self.classifier` inside forward, rebuilt on every call): its parameters
    /// are named as `named_parameters()` names them, `classifier.weight`.
    pub fn orphan_registered(&mut self, group: u64, path: &str) {
        if path.is_empty() || self.orphan_prefixes.get(&group).is_none_or(|p| p == path) {
            return;
        }
        self.orphan_prefixes.insert(group, path.to_owned());
        for t in &mut self.capture.tensors {
            if t.module == Some(group) && t.kind == TensorKind::Orphan {
                t.name = format!("{path}.{}", t.attr);
            }
        }
        if let Some(m) = self.module_mut(group) {
            m.name = path.to_owned();
            m.attr = path.rsplit('.').next().unwrap_or(path).to_owned();
        }
    }

    /// An orphan module's call site (first one kept) and a new instance of it.
    pub fn orphan_call(&mut self, key: u64, site: &At, new_instance: bool) {
        let loc = self.loc(site);
        if let Some(m) = self.module_mut(key) {
            if m.first_call.is_none() {
                m.first_call = loc;
            }
            if new_instance {
                m.instances += 1;
            }
        }
    }

    /// Adds or replaces a tensor.
    pub fn tensor(&mut self, t: TensorInfo) {
        let rec = TensorRec {
            key: t.key,
            name: t.name,
            kind: t.kind,
            module: t.module,
            attr: t.attr,
            shape: t.shape,
            dtype: t.dtype,
            requires_grad: t.requires_grad,
            is_leaf: t.is_leaf,
            is_parameter: t.is_parameter,
            grad_fn_chain: t.chain,
            leaf: t.leaf,
            assigned_at: None,
            local_numel: None,
            frozen_at: self.frozen.get(&t.key).cloned(),
            library_freeze: self.library_frozen.get(&t.key).cloned(),
        };
        match self.tensors.get(&t.key) {
            Some(&i) => self.capture.tensors[i] = rec,
            None => {
                self.tensors.insert(t.key, self.capture.tensors.len());
                self.capture.tensors.push(rec);
            }
        }
    }

    /// A tensor registered earlier is no longer part of any model: `foreign` when an
    /// optimizer still holds it, else `hidden` (kept, not shown).
    pub fn retire(&mut self, key: u64) {
        let held = self
            .capture
            .optimizers
            .iter()
            .any(|o| o.params.contains(&key));
        if let Some(&i) = self.tensors.get(&key) {
            self.capture.tensors[i].kind = if held {
                TensorKind::Foreign
            } else {
                TensorKind::Hidden
            };
        }
    }

    pub fn is_orphan_tensor(&self, key: u64) -> bool {
        self.tensors.get(&key).is_some_and(|&i| {
            matches!(
                self.capture.tensors[i].kind,
                TensorKind::Orphan | TensorKind::Hidden
            )
        })
    }

    /// Whether an optimizer seen so far holds the tensor.
    pub fn tensor_optimized(&self, key: u64) -> bool {
        self.capture
            .optimizers
            .iter()
            .any(|o| o.params.contains(&key))
    }

    /// The model root of the module a registered tensor belongs to.
    pub fn tensor_root(&self, key: u64) -> Option<u64> {
        let t = &self.capture.tensors[*self.tensors.get(&key)?];
        let m = &self.capture.modules[*self.modules.get(&t.module?)?];
        m.root
    }

    pub fn has_tensor(&self, key: u64) -> bool {
        self.tensors.contains_key(&key)
    }

    /// Adds an optimizer, or updates its parameters and learning rates.
    pub fn optimizer(
        &mut self,
        key: u64,
        class: String,
        created_at: &At,
        params: Vec<u64>,
        lrs: Vec<f64>,
        group_sizes: Vec<u32>,
    ) {
        let created_at = self.loc(created_at);
        match self.optimizers.get(&key) {
            Some(&i) => {
                let o = &mut self.capture.optimizers[i];
                o.params = params;
                o.lrs = lrs;
                o.group_sizes = group_sizes;
                if o.created_at.is_none() {
                    o.created_at = created_at;
                }
            }
            None => {
                self.optimizers.insert(key, self.capture.optimizers.len());
                self.capture.optimizers.push(OptimizerRec {
                    key,
                    class,
                    created_at,
                    params,
                    lrs,
                    group_sizes,
                });
            }
        }
    }

    pub fn backward_begin(&mut self, kind: BackwardKind, site: &At, loss_grad_fn: Option<String>) {
        let seq = self.next_seq();
        let location = self.loc(site);
        self.current_backward = Some(self.capture.backwards.len());
        self.capture.backwards.push(BackwardRec {
            seq,
            kind,
            location,
            loss_grad_fn,
            ..Default::default()
        });
    }

    /// A post-accumulate-grad hook fired for `key` during the current backward.
    pub fn reached(&mut self, key: u64) {
        if let Some(b) = self
            .current_backward
            .and_then(|i| self.capture.backwards.get_mut(i))
        {
            b.reached.push(key);
        }
    }

    /// The current `autograd.grad(create_graph=True)` call: `upstream` are the tracked tensors
    /// its outputs depend on, `kept` those its derivatives still depend on. The difference is
    /// constant in the derivative (see `BackwardRec::constant_in_derivative`).
    pub fn derivative(&mut self, upstream: &[u64], kept: &[u64]) {
        let kept: std::collections::HashSet<u64> = kept.iter().copied().collect();
        if let Some(b) = self
            .current_backward
            .and_then(|i| self.capture.backwards.get_mut(i))
        {
            let mut lost: Vec<u64> = upstream
                .iter()
                .copied()
                .filter(|k| !kept.contains(k))
                .collect();
            lost.sort_unstable();
            lost.dedup();
            b.constant_in_derivative = lost;
        }
    }

    pub fn backward_end(&mut self, grad_norms: Vec<(u64, Option<f64>)>, error: Option<String>) {
        if let Some(b) = self
            .current_backward
            .take()
            .and_then(|i| self.capture.backwards.get_mut(i))
        {
            b.grad_norms = grad_norms;
            b.error = error;
        }
    }

    /// An optimizer step begins; `weight_norms` are the weights before it. Returns the step's
    /// index for this optimizer (from 1).
    pub fn step_pre(&mut self, optimizer: u64, weight_norms: Vec<(u64, f64)>) -> u32 {
        let seq = self.next_seq();
        let index = self
            .capture
            .steps
            .iter()
            .filter(|s| s.optimizer == optimizer)
            .count() as u32
            + 1;
        self.capture.steps.push(StepRec {
            seq,
            optimizer,
            index,
            grad_norms: Vec::new(),
            weight_before: weight_norms,
            weight_after: Vec::new(),
        });
        index
    }

    /// The step ended: the gradients it used and the weights after it.
    pub fn step_post(
        &mut self,
        optimizer: u64,
        grad_norms: Vec<(u64, Option<f64>)>,
        weight_norms: Vec<(u64, f64)>,
    ) {
        if let Some(s) = self
            .capture
            .steps
            .iter_mut()
            .rev()
            .find(|s| s.optimizer == optimizer)
        {
            s.grad_norms = grad_norms;
            s.weight_after = weight_norms;
        }
    }

    /// A cause seen by the tracer itself (a clip bound, a gradient hook, a reused graph).
    #[allow(clippy::too_many_arguments)]
    pub fn add_cut(
        &mut self,
        kind: Category,
        op: String,
        site: &At,
        params: Vec<u64>,
        related: &At,
        related_message: String,
        step: u32,
    ) {
        let location = self.loc(site);
        let related = self
            .loc(related)
            .map(|location| {
                vec![Related {
                    location,
                    message: related_message,
                }]
            })
            .unwrap_or_default();
        // One cause at one line is one cut: a hook registered in a loop over parameters, or
        // a clip call, reports each tensor it touches, and they join the first report.
        if let Some(c) = self
            .capture
            .cuts
            .iter_mut()
            .find(|c| c.kind == kind && location.is_some() && c.location == location)
        {
            for p in params {
                if !c.params.contains(&p) {
                    c.params.push(p);
                }
            }
            return;
        }
        self.capture.cuts.push(CutRec {
            kind,
            op,
            location,
            related,
            params,
            chain: Vec::new(),
            chain_from: None,
            step,
            within: None,
        });
    }

    /// `requires_grad` set on a tensor while observing (`p.requires_grad = ...`,
    /// `requires_grad_(...)`, `module.requires_grad_(...)`): at the user's line `site`, by
    /// code of the installed library in file `via` when a library's code made the call (PEFT
    /// freezing the base inside `get_peft_model`). `by_owner`: frozen inside the constructor
    /// of the module it belongs to (part of the architecture, not a training choice).
    ///
    /// A set that changes nothing (`was == value`) has no author: Lightning's
    /// `toggle_optimizer` sets `requires_grad=False` again on what the script had frozen, and
    /// the freeze stays the script's.
    pub fn requires_grad_set(
        &mut self,
        key: u64,
        value: bool,
        site: &At,
        via: Option<&str>,
        by_owner: bool,
        was: bool,
    ) {
        if was == value {
            return;
        }
        let loc = self.loc(site);
        let package = via.and_then(gradsleuth_model::package_of);
        if value {
            self.frozen.remove(&key);
            if let Some(f) = self.library_frozen.get_mut(&key) {
                if package.is_some_and(|p| p == f.package) {
                    let backwards = self.capture.backwards.len();
                    self.library_restored
                        .insert(key, (f.package.clone(), backwards));
                    self.library_frozen.remove(&key);
                } else {
                    f.unfrozen_at = loc;
                }
            }
        } else {
            match &loc {
                Some(l) => self.frozen.insert(key, l.clone()),
                None => self.frozen.remove(&key),
            };
            match package {
                Some(p) => self.library_frozen.insert(
                    key,
                    LibraryFreeze {
                        package: p.to_owned(),
                        at: loc,
                        unfrozen_at: None,
                        // Turned back on by the same package, and a backward ran while it
                        // was on: Lightning's `toggle_optimizer` around each step, not PEFT
                        // freezing a module again after `bias="all"` unfroze its bias.
                        toggled: self
                            .library_restored
                            .get(&key)
                            .is_some_and(|(r, at)| r == p && self.capture.backwards.len() > *at),
                    },
                ),
                None => self.library_frozen.remove(&key),
            };
        }
        if let Some(&i) = self.tensors.get(&key) {
            let t = &mut self.capture.tensors[i];
            t.frozen_at = self.frozen.get(&key).cloned();
            t.library_freeze = self.library_frozen.get(&key).cloned();
        }
        let v = &mut self.capture.built_frozen;
        match (v.binary_search(&key), by_owner && !value) {
            (Err(i), true) => v.insert(i, key),
            (Ok(i), false) => {
                v.remove(i);
            }
            _ => {}
        }
    }

    /// A parameter whose values a checkpoint load wrote (or that a library marked loaded).
    pub fn loaded(&mut self, key: u64) {
        insert_sorted(&mut self.capture.loaded, key);
    }

    /// Whether each tensor changed between before the first observed step and the end of
    /// observation (exact: float64 norms).
    pub fn weight_changes(&mut self, changes: Vec<(u64, bool)>) {
        self.capture.weight_changes.extend(changes);
    }

    /// `torch.inference_mode()` was entered at `site` (the user's line).
    pub fn inference_entered(&mut self, site: &At) {
        if let (Some(file), Some(line)) = (&site.file, site.line) {
            let function = site.function.as_deref().unwrap_or("");
            self.inference_block = Some(Site::new(file, line, function));
        }
    }

    /// Parameters whose values are all zero at the end of observation.
    pub fn zero_valued(&mut self, keys: Vec<u64>) {
        let z = &mut self.capture.zero_valued;
        z.extend(keys);
        z.sort_unstable();
        z.dedup();
    }

    pub fn zero_grad(&mut self, target: ZeroGradTarget, key: u64, site: &At) {
        let seq = self.next_seq();
        let location = self.loc(site);
        self.capture.zero_grads.push(ZeroGradRec {
            seq,
            target,
            key,
            location,
        });
    }

    pub fn scaler_step(&mut self, optimizer: u64, stepped: bool, scale: Option<f64>, site: &At) {
        let seq = self.next_seq();
        let location = self.loc(site);
        self.capture.scaler_steps.push(ScalerStepRec {
            seq,
            optimizer,
            stepped,
            scale,
            location,
        });
    }

    pub fn set_error(
        &mut self,
        kind: String,
        message: String,
        site: &At,
        frames: Vec<String>,
        holder: Option<String>,
    ) {
        let location = self.loc(site);
        let refused = refuses_inference_tensor(&message);
        self.capture.error = Some(ScriptError {
            kind,
            message,
            location,
            frames,
            holder,
        });
        if refused && self.capture.root_calls == 0 {
            self.refused_before_forward();
        }
    }

    /// The script died of an inference tensor torch refused before any model's forward (a
    /// model built under `inference_mode` whose constructor then resets a buffer in place,
    /// "Inplace update to inference tensor outside InferenceMode"): no op log ran to see it,
    /// and the last `inference_mode` block the user's code entered made it, as
    /// [`crate::oplog::OpLog`] says of a refusal it did not see.
    fn refused_before_forward(&mut self) {
        if self.tells_inference() {
            return;
        }
        let Some(block) = self.inference_block.clone() else {
            return;
        };
        let location = self.site_location(&block);
        self.capture.cuts.push(CutRec {
            kind: Category::NoGrad,
            op: gradsleuth_model::capture::INFERENCE_DATA_OP.to_owned(),
            location,
            related: Vec::new(),
            params: Vec::new(),
            chain: Vec::new(),
            chain_from: None,
            step: 0,
            within: None,
        });
    }

    /// A cut already tells of an `inference_mode` block (the tensor it made, or a model's
    /// parameters built under it).
    pub(crate) fn tells_inference(&self) -> bool {
        self.capture.cuts.iter().any(|c| tells_inference(&c.op))
    }

    /// A probe run: the value of a scalar loss passed to backward.
    pub fn loss_value(&mut self, value: f64) {
        if self.probe {
            self.capture.losses.push(value);
        }
    }

    /// A probe run: one op of the op-level step and its tensor outputs, called from `site`.
    pub fn op_digest(&mut self, op: String, site: Option<&Site>, outputs: Vec<TensorDigest>) {
        if !self.probe || self.capture.op_digests.len() >= OP_DIGEST_LIMIT {
            return;
        }
        let location = site.and_then(|s| self.site_location(s)).map(|mut l| {
            l.snippet = None;
            l
        });
        self.capture.op_digests.push(OpDigest {
            op,
            location,
            outputs,
        });
    }

    pub fn note(&mut self, text: String) {
        if self.capture.notes.len() < 100 {
            self.capture.notes.push(text);
        }
    }

    /// Keys of every tensor a backward reached, from backward number `since` on.
    pub fn reached_keys(&self, since: usize) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .capture
            .backwards
            .iter()
            .skip(since)
            .flat_map(|b| b.reached.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub fn backward_count(&self) -> usize {
        self.capture.backwards.len()
    }
}

/// Inserts `key` into the sorted `keys` once.
fn insert_sorted(keys: &mut Vec<u64>, key: u64) {
    if let Err(i) = keys.binary_search(&key) {
        keys.insert(i, key);
    }
}

/// Torch refusing an inference tensor in autograd (saved for backward, updated in place
/// outside `inference_mode`, a view of one modified in place).
pub(crate) fn refuses_inference_tensor(message: &str) -> bool {
    message.contains("Inference tensor")
        || message.contains("inference tensor outside InferenceMode")
        || message.contains("created in inference mode")
}

/// A cut's `op` that tells of an `inference_mode` block.
pub(crate) fn tells_inference(op: &str) -> bool {
    op == INFERENCE_DATA_OP || op == INFERENCE_PARAMS_OP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_toggling_a_flag_is_told_from_a_freeze_and_a_no_op_set_has_no_author() {
        let lightning = "/v/lib/python3.11/site-packages/lightning/pytorch/core/module.py";
        let script = At::new("train.py", 61, None);
        let freeze = |r: &Recorder, key: u64| r.library_frozen.get(&key).cloned();
        let mut r = Recorder::new("run", 3, None, Vec::new());
        // Lightning's `toggle_optimizer` turns a generator weight off, `untoggle_optimizer`
        // back on, the generator's backward runs, and it is off again for the discriminator.
        r.requires_grad_set(1, false, &script, Some(lightning), false, true);
        assert!(freeze(&r, 1).is_some_and(|f| f.package == "lightning" && !f.toggled));
        r.requires_grad_set(1, true, &script, Some(lightning), false, false);
        assert!(freeze(&r, 1).is_none());
        r.backward_begin(BackwardKind::Backward, &script, None);
        r.requires_grad_set(1, false, &script, Some(lightning), false, true);
        assert!(freeze(&r, 1).is_some_and(|f| f.toggled));
        // PEFT freezes everything, `bias="all"` unfreezes a bias, wrapping a module for
        // `modules_to_save` freezes its original again, no backward in between: a freeze.
        let peft = "/v/lib/python3.11/site-packages/peft/utils/other.py";
        r.requires_grad_set(3, false, &script, Some(peft), false, true);
        r.requires_grad_set(3, true, &script, Some(peft), false, false);
        r.requires_grad_set(3, false, &script, Some(peft), false, true);
        assert!(freeze(&r, 3).is_some_and(|f| f.package == "peft" && !f.toggled));
        // The script froze a weight; Lightning sets the same flag again: still the script's.
        r.requires_grad_set(2, false, &script, None, false, true);
        r.requires_grad_set(2, false, &script, Some(lightning), false, false);
        assert!(freeze(&r, 2).is_none());
        assert_eq!(r.frozen.get(&2).map(|l| l.line), Some(61));
    }

    #[test]
    fn an_inference_tensor_refused_before_any_forward_names_the_last_block() {
        let refusal = "Inplace update to inference tensor outside InferenceMode is not allowed.";
        // The cuts told when the script dies with `message`, after entering an
        // `inference_mode` block at line 10 (or not) and running a forward (or not).
        let told = |entered: bool, forward: bool, kind: &str, message: &str| {
            let mut r = Recorder::new("run", 3, None, Vec::new());
            if entered {
                r.inference_entered(&At::new("train.py", 10, Some("projection")));
            }
            if forward {
                r.root_call();
            }
            let raised = At::new("train.py", 14, Some("projection"));
            r.set_error(kind.into(), message.into(), &raised, Vec::new(), None);
            r.capture
                .cuts
                .iter()
                .filter(|c| c.op == INFERENCE_DATA_OP)
                .map(|c| (c.kind, c.location.as_ref().map(|l| l.line), c.step))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            told(true, false, "RuntimeError", refusal),
            vec![(Category::NoGrad, Some(10), 0)]
        );
        // Another error, or no block entered: nothing to say.
        assert!(told(true, false, "ValueError", "bad shape").is_empty());
        assert!(told(false, false, "RuntimeError", refusal).is_empty());
        // After a forward the op log saw the step: it tells the refusal (see OpLog::failed).
        assert!(told(true, true, "RuntimeError", refusal).is_empty());
    }

    #[test]
    fn processes_are_counted_per_target_and_line_and_dataloader_workers_left_out() {
        let mut r = Recorder::new("run", 3, None, Vec::new());
        let at = At {
            file: Some("hogwild.py".into()),
            line: Some(30),
            function: None,
        };
        for _ in 0..2 {
            r.child_process("train".into(), "__main__", "fork".into(), &at);
        }
        r.child_process(
            "_worker_loop".into(),
            "torch.utils.data._utils.worker",
            "fork".into(),
            &at,
        );
        assert_eq!(r.capture.children.len(), 1);
        assert_eq!(
            (
                r.capture.children[0].target.as_str(),
                r.capture.children[0].count
            ),
            ("train", 2)
        );
    }

    #[test]
    fn a_module_update_keeps_its_runs_and_definitions() {
        let mut r = Recorder::new("run", 3, None, Vec::new());
        let m = ModuleInfo {
            key: 7,
            class: "Linear".into(),
            name: "fc".into(),
            kind: ModuleKind::Registered,
            ..Default::default()
        };
        r.module(m.clone());
        r.module_ran(7, true, false);
        r.module_ran(7, false, true);
        r.module(ModuleInfo {
            name: "head.fc".into(),
            ..m
        });
        let rec = &r.capture.modules[0];
        assert_eq!(
            (
                rec.runs,
                rec.runs_no_grad,
                rec.runs_stateless,
                rec.name.as_str()
            ),
            (2, 1, 1, "head.fc")
        );
        assert_eq!(r.capture.modules.len(), 1);
    }

    #[test]
    fn steps_are_counted_per_optimizer_and_backward_reaches_are_kept() {
        let mut r = Recorder::new("run", 3, None, Vec::new());
        assert_eq!(r.step_pre(1, Vec::new()), 1);
        assert_eq!(r.step_pre(2, Vec::new()), 1);
        assert_eq!(r.step_pre(1, Vec::new()), 2);
        r.backward_begin(BackwardKind::Backward, &At::default(), None);
        r.reached(5);
        r.reached(3);
        r.reached(5);
        r.backward_end(vec![(5, Some(1.0))], None);
        r.reached(9); // no backward in progress: dropped
        assert_eq!(r.reached_keys(0), vec![3, 5]);
        assert_eq!(r.backward_count(), 1);
    }

    #[test]
    fn modules_built_at_one_call_site_are_one_group_named_by_it() {
        let mut r = Recorder::new("run", 3, None, Vec::new());
        let site = At::new("/u/train.py", 31, Some("Net.forward"));
        let (g, new) = r.orphan(
            10,
            1,
            "Linear",
            &site,
            Some(2),
            &At::default(),
            &At::default(),
        );
        assert_eq!((g, new), (10, true));
        r.orphan_param(g, 11, "weight", vec![4, 4], "float32".into(), true, true);
        // The next step builds another instance at the same line: the same group.
        assert_eq!(
            r.orphan(
                20,
                1,
                "Linear",
                &site,
                Some(2),
                &At::default(),
                &At::default()
            ),
            (10, false)
        );
        let other = At::new("/u/train.py", 32, None);
        let (_, new_group) = r.orphan(
            30,
            1,
            "Linear",
            &other,
            None,
            &At::default(),
            &At::default(),
        );
        assert!(new_group);
        assert_eq!(r.capture.modules[0].name, "<Linear built in forward>");
        assert_eq!(r.capture.modules[0].kind, ModuleKind::Orphan);
        assert_eq!(r.capture.tensors[0].name, "Linear@train.py:31.weight");
        assert_eq!(r.capture.modules.len(), 2);
        // Assigned to `self.proj` inside forward: named as named_parameters() names it.
        r.orphan_registered(10, "encoder.proj");
        assert_eq!(r.capture.tensors[0].name, "encoder.proj.weight");
        assert_eq!(r.capture.modules[0].name, "encoder.proj");
        r.orphan_param(10, 12, "bias", vec![4], "float32".into(), true, true);
        assert_eq!(r.capture.tensors[1].name, "encoder.proj.bias");
    }

    #[test]
    fn a_retired_tensor_is_foreign_only_while_an_optimizer_holds_it() {
        let mut r = Recorder::new("run", 3, None, Vec::new());
        for key in [1, 2] {
            r.tensor(TensorInfo {
                key,
                kind: TensorKind::Param,
                ..Default::default()
            });
        }
        r.optimizer(9, "SGD".into(), &At::default(), vec![1], vec![0.1], vec![1]);
        r.retire(1);
        r.retire(2);
        assert_eq!(r.capture.tensors[0].kind, TensorKind::Foreign);
        assert_eq!(r.capture.tensors[1].kind, TensorKind::Hidden);
        assert!(r.is_orphan_tensor(2) && !r.is_orphan_tensor(1));
    }
}
