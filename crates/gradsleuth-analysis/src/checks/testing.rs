//! A small builder for synthetic captures, so each check's tests read like the scenario.

use gradsleuth_model::capture::*;
use gradsleuth_model::{Finding, Location};

pub struct Scenario {
    pub capture: Capture,
    seq: u64,
    _dir: Option<tempfile::TempDir>,
}

impl Scenario {
    /// A model class whose source is `src` (line 1 is the `class` line).
    pub fn new() -> Self {
        Scenario {
            capture: Capture::default(),
            seq: 0,
            _dir: None,
        }
    }

    /// Writes `src` as the model's file; returns its path.
    pub fn source(&mut self, src: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.py");
        std::fs::write(&path, src).unwrap();
        self._dir = Some(dir);
        path.to_string_lossy().into_owned()
    }

    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    pub fn module(
        &mut self,
        key: u64,
        class: &str,
        name: &str,
        parent: Option<u64>,
        kind: ModuleKind,
        runs: u32,
    ) -> &mut ModuleRec {
        let root = parent
            .map(|p| self.capture.module(p).and_then(|m| m.root).unwrap_or(p))
            .or(Some(key));
        self.capture.modules.push(ModuleRec {
            key,
            class: class.into(),
            root,
            name: name.into(),
            parent,
            attr: name.rsplit('.').next().unwrap_or(name).into(),
            kind,
            runs,
            ..Default::default()
        });
        self.capture.modules.last_mut().unwrap()
    }

    pub fn param(&mut self, key: u64, name: &str, module: u64) -> &mut TensorRec {
        self.tensor(key, name, module, TensorKind::Param)
    }

    pub fn tensor(
        &mut self,
        key: u64,
        name: &str,
        module: u64,
        kind: TensorKind,
    ) -> &mut TensorRec {
        self.capture.tensors.push(TensorRec {
            key,
            name: name.into(),
            kind,
            module: Some(module),
            attr: name.rsplit('.').next().unwrap_or(name).into(),
            shape: vec![4, 4],
            dtype: "float32".into(),
            requires_grad: true,
            is_leaf: true,
            is_parameter: kind == TensorKind::Param,
            ..Default::default()
        });
        self.capture.tensors.last_mut().unwrap()
    }

    pub fn optimizer(&mut self, key: u64, params: &[u64], at: Option<Location>) {
        self.capture.optimizers.push(OptimizerRec {
            key,
            class: "Adam".into(),
            created_at: at,
            params: params.to_vec(),
            lrs: vec![1e-3],
            group_sizes: Vec::new(),
        });
    }

    /// A backward that reached `reached`; returns its seq.
    pub fn backward(&mut self, reached: &[u64], norms: &[(u64, Option<f64>)]) -> u64 {
        let seq = self.next();
        self.capture.backwards.push(BackwardRec {
            seq,
            kind: gradsleuth_model::capture::BackwardKind::Backward,
            location: Some(Location::new("train.py", 40)),
            loss_grad_fn: Some("MseLossBackward0".into()),
            reached: reached.to_vec(),
            grad_norms: norms.to_vec(),
            ..Default::default()
        });
        seq
    }

    /// An optimizer step: (key, grad norm, weight before, weight after).
    pub fn step(&mut self, opt: u64, rows: &[(u64, Option<f64>, f64, f64)]) -> u64 {
        let seq = self.next();
        let index = self
            .capture
            .steps
            .iter()
            .filter(|s| s.optimizer == opt)
            .count() as u32
            + 1;
        self.capture.steps.push(StepRec {
            seq,
            optimizer: opt,
            index,
            grad_norms: rows.iter().map(|r| (r.0, r.1)).collect(),
            weight_before: rows.iter().map(|r| (r.0, r.2)).collect(),
            weight_after: rows.iter().map(|r| (r.0, r.3)).collect(),
        });
        seq
    }

    pub fn zero_grad(&mut self, opt: u64, line: u32) {
        let seq = self.next();
        self.capture.zero_grads.push(ZeroGradRec {
            seq,
            target: gradsleuth_model::capture::ZeroGradTarget::Optimizer,
            key: opt,
            location: Some(Location::new("train.py", line)),
        });
    }

    pub fn scaler_step(&mut self, opt: u64, stepped: bool) {
        let seq = self.next();
        self.capture.scaler_steps.push(ScalerStepRec {
            seq,
            optimizer: opt,
            stepped,
            scale: Some(65536.0),
            location: Some(Location::new("train.py", 50)),
        });
    }

    /// Findings of the one check.
    pub fn run(&self, check: &super::Check) -> Vec<Finding> {
        let ctx = crate::Context::new(&self.capture);
        // Earlier checks claim parameters first, as in a real analysis.
        for c in super::ALL {
            if c.code == check.code {
                return (c.run)(&ctx);
            }
            let _ = (c.run)(&ctx);
        }
        unreachable!()
    }

    /// The full report.
    pub fn report(&self) -> gradsleuth_model::Report {
        crate::analyze(&self.capture)
    }

    /// The full analysis says nothing above info.
    pub fn quiet(&self) -> bool {
        self.report()
            .findings
            .iter()
            .all(|f| f.severity == gradsleuth_model::Severity::Info)
    }
}

/// A healthy model: `Net` with `fc` (weight, bias) trained by one Adam for `steps` steps.
pub fn healthy(steps: u32) -> Scenario {
    let mut s = Scenario::new();
    s.module(1, "Net", "", None, ModuleKind::Root, steps);
    s.module(2, "Linear", "fc", Some(1), ModuleKind::Registered, steps);
    s.param(10, "fc.weight", 2);
    s.param(11, "fc.bias", 2);
    s.optimizer(100, &[10, 11], Some(Location::new("train.py", 30)));
    s.capture.root_calls = steps;
    for i in 0..steps {
        s.backward(&[10, 11], &[]);
        let w = 1.0 + f64::from(i);
        s.step(
            100,
            &[(10, Some(0.5), w, w + 0.1), (11, Some(0.2), w, w + 0.1)],
        );
    }
    s
}
