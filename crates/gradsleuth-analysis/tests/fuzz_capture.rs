//! Property tests: no input makes loading, analysing or rendering a capture panic.
//!
//! Two generators: arbitrary bytes/JSON fed to the loader, and structurally valid captures
//! whose cross-references are random (dangling keys, parent cycles, NaN and negative norms,
//! steps of optimizers that do not exist), fed to the analysis and both renderers.

use gradsleuth_model::capture::*;
use gradsleuth_model::{Capture, Location};
use proptest::prelude::*;

fn key() -> impl Strategy<Value = u64> {
    0u64..12
}

fn loc() -> impl Strategy<Value = Option<Location>> {
    proptest::option::of((".{0,12}", 0u32..5000).prop_map(|(f, l)| Location::new(f, l)))
}

fn module() -> impl Strategy<Value = ModuleRec> {
    (
        key(),
        proptest::option::of(key()),
        proptest::option::of(key()),
        "[a-z.\\[\\]0-9]{0,10}",
        0u32..5,
        0u32..5,
        loc(),
        0u8..4,
        0u32..5,
    )
        .prop_map(
            |(k, root, parent, name, runs, no_grad, def, kind, stateless)| ModuleRec {
                key: k,
                class: "Linear".into(),
                root,
                name: name.clone(),
                parent,
                attr: name,
                kind: [
                    ModuleKind::Root,
                    ModuleKind::Registered,
                    ModuleKind::Container,
                    ModuleKind::Orphan,
                ][kind as usize],
                class_def: def.clone(),
                forward_def: def,
                runs,
                runs_no_grad: no_grad,
                runs_stateless: stateless,
                first_call: None,
                instances: runs,
                assigned_at: None,
            },
        )
}

fn tensor() -> impl Strategy<Value = TensorRec> {
    (
        key(),
        proptest::option::of(key()),
        0u8..7,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(key()),
    )
        .prop_map(|(k, module, kind, rg, leaf, param, hidden)| TensorRec {
            key: k,
            name: format!("t{k}"),
            kind: [
                TensorKind::Param,
                TensorKind::Container,
                TensorKind::Attribute,
                TensorKind::Buffer,
                TensorKind::Orphan,
                TensorKind::Foreign,
                TensorKind::Hidden,
            ][kind as usize],
            module,
            attr: "weight".into(),
            shape: vec![2, 2],
            dtype: "float32".into(),
            requires_grad: rg,
            is_leaf: leaf,
            is_parameter: param,
            grad_fn_chain: vec!["MulBackward0".into()],
            leaf: hidden,
            local_numel: if k % 5 == 0 { Some(k % 3) } else { None },
            frozen_at: None,
            // Some frozen by PEFT, some of those unfrozen by the script, some toggled.
            library_freeze: (k % 4 == 0).then(|| LibraryFreeze {
                package: "peft".into(),
                at: None,
                unfrozen_at: (k % 8 == 0).then(|| Location::new("t.py", 3)),
                toggled: k % 12 == 0,
            }),
            assigned_at: None,
        })
}

fn norm() -> impl Strategy<Value = Option<f64>> {
    proptest::option::of(prop_oneof![
        Just(f64::NAN),
        Just(-1.0),
        Just(-2.0),
        Just(0.0),
        0.0f64..10.0
    ])
}

fn capture() -> impl Strategy<Value = Capture> {
    (
        proptest::collection::vec(module(), 0..8),
        proptest::collection::vec(tensor(), 0..10),
        proptest::collection::vec((key(), proptest::collection::vec(key(), 0..6)), 0..3),
        proptest::collection::vec(
            (
                proptest::collection::vec(key(), 0..6),
                proptest::collection::vec((key(), norm()), 0..4),
            ),
            0..4,
        ),
        proptest::collection::vec(
            (
                key(),
                proptest::collection::vec((key(), norm()), 0..4),
                proptest::collection::vec((key(), 0.0f64..3.0), 0..4),
            ),
            0..4,
        ),
        proptest::collection::vec((key(), any::<bool>()), 0..3),
        proptest::collection::vec(key(), 0..3),
        0u32..4,
    )
        .prop_map(
            |(modules, tensors, opts, backwards, steps, scaler, zero, root_calls)| {
                let mut c = Capture {
                    modules,
                    tensors,
                    root_calls,
                    ..Default::default()
                };
                let mut seq = 0;
                c.optimizers = opts
                    .into_iter()
                    .map(|(k, params)| OptimizerRec {
                        key: k,
                        class: "SGD".into(),
                        created_at: None,
                        params,
                        lrs: vec![0.0],
                        group_sizes: Vec::new(),
                    })
                    .collect();
                for (reached, grad_norms) in backwards {
                    seq += 1;
                    c.backwards.push(BackwardRec {
                        seq,
                        kind: gradsleuth_model::capture::BackwardKind::Backward,
                        reached,
                        grad_norms,
                        ..Default::default()
                    });
                }
                for (opt, g, w) in steps {
                    seq += 1;
                    c.steps.push(StepRec {
                        seq,
                        optimizer: opt,
                        index: 1,
                        grad_norms: g,
                        weight_before: w.clone(),
                        weight_after: w,
                    });
                }
                for (opt, stepped) in scaler {
                    seq += 1;
                    c.scaler_steps.push(ScalerStepRec {
                        seq,
                        optimizer: opt,
                        stepped,
                        scale: Some(1.0),
                        location: None,
                    });
                }
                for k in zero {
                    seq += 1;
                    c.zero_grads.push(ZeroGradRec {
                        seq,
                        target: gradsleuth_model::capture::ZeroGradTarget::Optimizer,
                        key: k,
                        location: None,
                    });
                }
                c
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn random_captures_never_panic(c in capture()) {
        let report = gradsleuth_analysis::analyze(&c);
        let _ = gradsleuth_render::text(&report, Default::default());
        let json = gradsleuth_render::json(&report);
        prop_assert!(json.contains("\"tool\": \"gradsleuth\""));
        // Every finding id is unique.
        let mut ids: Vec<_> = report.findings.iter().map(|f| f.id.clone()).collect();
        ids.sort();
        ids.dedup();
        prop_assert_eq!(ids.len(), report.findings.len());
        // And the capture survives a save/load round trip (NaN norms become null).
        prop_assert!(Capture::from_json(&c.to_json()).is_ok());
    }

    #[test]
    fn arbitrary_text_never_panics_the_loader(s in ".{0,400}") {
        let _ = Capture::from_json(&s);
    }

    #[test]
    fn truncated_and_mutated_captures_are_errors_not_panics(cut in 0usize..2000, flip in 0usize..2000, byte in any::<u8>()) {
        let mut c = Capture::default();
        c.tensors.push(TensorRec { key: 1, name: "w".into(), ..Default::default() });
        c.backwards.push(BackwardRec { seq: 1, kind: gradsleuth_model::capture::BackwardKind::Backward, reached: vec![1], ..Default::default() });
        let mut bytes = c.to_json().into_bytes();
        if !bytes.is_empty() {
            let i = flip % bytes.len();
            bytes[i] = byte;
            bytes.truncate(cut.min(bytes.len()));
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(c) = Capture::from_json(&text) {
            let _ = gradsleuth_analysis::analyze(&c);
        }
    }
}
