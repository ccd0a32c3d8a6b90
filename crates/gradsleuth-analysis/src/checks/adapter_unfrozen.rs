//! GS111 `adapter-base-unfrozen`: parameters PEFT froze (everything its adapter config does not
//! train) that the script's own code unfroze. The capture knows who froze a parameter: a
//! freeze made by an installed library's code is recorded with its package and the user's line
//! whose call made it, and an unfreeze by the script's own code afterwards with that line
//! (`TensorRec::library_freeze`). Only PEFT's freezes are a statement of intent this check
//! holds the script to: its config says what trains and what `save_pretrained` keeps.

use std::collections::HashSet;

use gradsleuth_model::capture::{LibraryFreeze, TensorKind, TensorRec};
use gradsleuth_model::{Finding, Location, Severity};

use super::{
    adapter_layer, describe, is_peft_class, model_of, module_name, plural, Check, Described, PEFT,
};
use crate::Context;

pub const CHECK: Check = Check { code: "GS111", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let params = || {
        ctx.facts
            .iter()
            .filter(|(t, f)| f.visible && t.kind == TensorKind::Param)
    };
    // Models that still hold a module of PEFT's own (an adapter layer, its wrapper): after
    // `merge_and_unload()` none is left, and training the plain model in full is a choice.
    let peft_roots: HashSet<u64> = ctx
        .capture
        .modules
        .iter()
        .filter(|m| is_peft_class(m))
        .filter_map(|m| m.root)
        .collect();
    let in_peft_model = |t: &TensorRec| model_of(ctx, t).is_some_and(|r| peft_roots.contains(&r));
    // Everything PEFT froze: the base, still frozen or not.
    let froze = params().filter(|(t, _)| ours(t).is_some()).count();
    let unfrozen: Vec<u64> = params()
        .filter(|(t, _)| {
            t.requires_grad
                && ours(t).is_some_and(|f| f.unfrozen_at.is_some())
                && in_peft_model(t)
                && adapter_layer(ctx, t).is_none()
                && !ctx.is_claimed(t.key)
        })
        .map(|(t, _)| t.key)
        .collect();
    if unfrozen.is_empty() {
        return Vec::new();
    }
    // Three fates: trained (a backward reached it and an optimizer holds it); stray (reached,
    // but unfrozen after the optimizer was built: no optimizer holds it); idle (no gradient:
    // PEFT's originals it routes around, or parts that never run).
    let fact = |k: &u64| ctx.facts.get(*k);
    let (reached, idle): (Vec<u64>, Vec<u64>) = unfrozen
        .iter()
        .partition(|k| fact(k).is_some_and(|f| f.reached()));
    let (trained, stray): (Vec<u64>, Vec<u64>) = reached
        .iter()
        .partition(|k| fact(k).is_some_and(|f| !f.optimizers.is_empty()));
    let first = ctx.facts.rec(unfrozen[0]).and_then(ours);
    let unfrozen_at = first.and_then(|f| ctx.locate(f.unfrozen_at.as_ref()));
    let frozen_at = first.and_then(|f| ctx.locate(f.at.as_ref()));
    let line = line_of(unfrozen_at.as_ref());
    ctx.claim(unfrozen.iter().copied());

    let mut said: Vec<String> = Vec::new();
    let mut fix = None;
    if !trained.is_empty() {
        let Described {
            what,
            modules,
            names,
        } = describe(ctx, &trained);
        let w = Words::of(names.len());
        if trained.len() * 2 > froze {
            said.push(format!(
                "{what} train again although PEFT froze them ({} of the {} PEFT froze, unfrozen by the script): the base model fine-tunes in full, spending the memory and compute LoRA exists to save, and `save_pretrained` on a model with an adapter writes only the adapter's weights, so what the base learns is lost on save.",
                trained.len(),
                plural(froze, "parameter")
            ));
            fix = Some(format!("Delete the unfreezing{line}: `get_peft_model` already made the adapters trainable. To fine-tune the whole model, train it without `get_peft_model`."));
        } else {
            let embedding = match modules.iter().any(|m| m.class == "Embedding") {
                true => " (an embedding layer is kept only when PEFT sees the vocabulary resized)",
                false => "",
            };
            said.push(format!(
                "{what} {train} outside the adapter config: PEFT froze {them} and the script unfroze {them}, but `save_pretrained` on a model with an adapter writes only the adapter's weights and `modules_to_save`, so what {they} {learn} is lost when the adapter is saved and reloaded{embedding}.",
                train = w.verb("trains", "train"),
                learn = w.verb("learns", "learn"),
                them = w.them,
                they = w.they,
            ));
            fix = Some(name_in_config(&modules, w.them, &line));
        }
    }
    if !stray.is_empty() {
        let Described {
            what,
            modules,
            names,
        } = describe(ctx, &stray);
        let w = Words::of(names.len());
        said.push(match said.is_empty() {
            true => format!(
                "{what} {was} unfrozen by the script after PEFT froze {them}, but after the optimizer was built: no optimizer holds {them}, so {they} {get} gradients and never {change}.",
                was = w.verb("was", "were"),
                get = w.verb("gets", "get"),
                change = w.verb("changes", "change"),
                them = w.them,
                they = w.they,
            ),
            false => format!(
                "{what}, unfrozen after the optimizer was built, {get} gradients no optimizer applies.",
                get = w.verb("gets", "get"),
            ),
        });
        fix.get_or_insert_with(|| name_in_config(&modules, w.them, &line));
    }
    if !idle.is_empty() {
        let Described { what, names, .. } = describe(ctx, &idle);
        let w = Words::of(names.len());
        let why = match names.iter().all(|n| n.contains(".original_module.")) {
            true => ": PEFT runs the trainable copy it made for `modules_to_save` instead, so unfreezing the original only puts it in the optimizer",
            false => " in the observed steps",
        };
        let get = w.verb("gets", "get");
        said.push(match said.is_empty() {
            true => format!(
                "{what} {was} unfrozen by the script after PEFT froze {them}, and {get} no gradient{why}.",
                was = w.verb("was", "were"),
                them = w.them,
            ),
            false => format!("{what}, unfrozen too, {get} no gradient{why}."),
        });
        fix.get_or_insert_with(|| {
            format!(
                "Delete the unfreezing{line}: PEFT already trains what `modules_to_save` names."
            )
        });
    }
    // Only parameters that get no gradient at all: nothing is lost but optimizer memory.
    let severity = match trained.is_empty() && stray.is_empty() {
        true => Severity::Info,
        false => Severity::Warning,
    };
    let mut names = super::names(ctx, &trained);
    names.extend(super::names(ctx, &stray));
    names.extend(super::names(ctx, &idle));
    let mut f = CHECK
        .finding(severity, said.join(" "))
        .at(unfrozen_at.clone())
        .related(
            frozen_at,
            "where PEFT froze them (its config: only the adapters and `modules_to_save` train)",
        );
    // Every other line that unfroze some of them.
    let mut seen: Vec<(String, u32)> = unfrozen_at
        .iter()
        .map(|l| (l.file.clone(), l.line))
        .collect();
    for k in &unfrozen {
        let Some(l) = ctx
            .facts
            .rec(*k)
            .and_then(ours)
            .and_then(|f| f.unfrozen_at.as_ref())
        else {
            continue;
        };
        if !seen.contains(&(l.file.clone(), l.line)) {
            seen.push((l.file.clone(), l.line));
            f = f.related(ctx.locate(Some(l)), "unfrozen here too");
        }
    }
    vec![f.fix(fix.unwrap_or_default()).params(names)]
}

/// Pronouns and verbs for one parameter or several.
struct Words {
    one: bool,
    them: &'static str,
    they: &'static str,
}

impl Words {
    fn of(n: usize) -> Words {
        let one = n == 1;
        Words {
            one,
            them: if one { "it" } else { "them" },
            they: if one { "it" } else { "they" },
        }
    }

    fn verb(&self, singular: &'static str, plural: &'static str) -> &'static str {
        if self.one {
            singular
        } else {
            plural
        }
    }
}

/// The fix for parts unfrozen by hand: say them in the config, where PEFT trains and saves them.
fn name_in_config(
    modules: &[&gradsleuth_model::capture::ModuleRec],
    them: &str,
    line: &str,
) -> String {
    let targets: Vec<String> = modules
        .iter()
        .take(4)
        .map(|m| format!("\"{}\"", module_name(m)))
        .collect();
    let targets = match targets.is_empty() {
        true => "\"...\"".to_owned(),
        false => targets.join(", "),
    };
    format!("Name {them} in the adapter config so PEFT trains and saves {them}: `LoraConfig(..., modules_to_save=[{targets}])`, and delete the unfreezing{line}.")
}

/// PEFT's freeze of `t`, if PEFT froze it.
fn ours(t: &TensorRec) -> Option<&LibraryFreeze> {
    t.library_freeze.as_ref().filter(|f| f.package == PEFT)
}

/// " at line N" for a location, or nothing.
fn line_of(l: Option<&Location>) -> String {
    l.map_or_else(String::new, |l| format!(" at line {}", l.line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::testing::{healthy, Scenario};
    use gradsleuth_model::capture::ModuleKind;

    /// PEFT's freeze at line 9 of the script, unfrozen by the script at line 12 or not.
    fn peft_freeze(unfrozen: bool) -> LibraryFreeze {
        LibraryFreeze {
            package: "peft".into(),
            at: Some(Location::new("train.py", 9)),
            unfrozen_at: unfrozen.then(|| Location::new("train.py", 12)),
            ..Default::default()
        }
    }

    /// `fc` is PEFT's base (frozen by `get_peft_model` at line 9), `lora` its adapter, `head`
    /// a classifier; `unfreeze`: the parameters the script set back to trainable at line 12.
    fn peft(unfreeze: &[u64]) -> Scenario {
        let mut s = healthy(2);
        s.module(3, "Linear", "lora", Some(1), ModuleKind::Registered, 2)
            .class_def = Some(Location::new(
            "/v/lib/python3.11/site-packages/peft/tuners/lora/layer.py",
            1,
        ));
        s.module(4, "Linear", "head", Some(1), ModuleKind::Registered, 2);
        s.param(20, "lora.weight", 3);
        for (k, name) in [(30, "head.weight"), (31, "head.bias")] {
            s.param(k, name, 4);
        }
        for t in &mut s.capture.tensors {
            if [10, 11, 30, 31].contains(&t.key) {
                let unfrozen = unfreeze.contains(&t.key);
                t.requires_grad = unfrozen;
                t.library_freeze = Some(peft_freeze(unfrozen));
            }
        }
        let trainable: Vec<u64> = [20].into_iter().chain(unfreeze.iter().copied()).collect();
        s.capture.optimizers[0].params = trainable.clone();
        s.capture
            .backwards
            .iter_mut()
            .for_each(|b| b.reached = trainable.clone());
        s
    }

    #[test]
    fn a_head_unfrozen_by_hand_is_lost_on_save_and_told_at_the_unfreeze() {
        let f = peft(&[30, 31]).run(&CHECK);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].severity, Severity::Warning);
        let m = &f[0].message;
        assert!(
            m.contains("`head` (2 parameters) train outside the adapter config"),
            "{m}"
        );
        assert!(m.contains("lost when the adapter is saved"), "{m}");
        assert_eq!(f[0].location.as_ref().map(|l| l.line), Some(12));
        assert_eq!(f[0].related[0].location.line, 9);
        assert!(f[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("modules_to_save=[\"head\"]"));
        assert_eq!(f[0].params, ["head.weight", "head.bias"]);
    }

    #[test]
    fn each_line_that_unfroze_some_of_them_is_shown() {
        let mut s = peft(&[30, 31]);
        let bias = s.capture.tensors.iter_mut().find(|t| t.key == 31).unwrap();
        bias.library_freeze.as_mut().unwrap().unfrozen_at = Some(Location::new("train.py", 14));
        let f = s.run(&CHECK);
        let lines: Vec<(u32, &str)> = f[0]
            .related
            .iter()
            .map(|r| (r.location.line, r.message.as_str()))
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[1], (14, "unfrozen here too"));
    }

    #[test]
    fn the_whole_base_unfrozen_is_full_fine_tuning() {
        let f = peft(&[10, 11, 30, 31]).run(&CHECK);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(
            f[0].message.contains("fine-tunes in full"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message.contains("(4 of the 4 parameters PEFT froze"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn an_original_peft_routes_around_is_info_and_not_an_unused_module() {
        let mut s = peft(&[30, 31]);
        for t in &mut s.capture.tensors {
            t.name = t.name.replace("head.", "head.original_module.");
        }
        s.capture
            .backwards
            .iter_mut()
            .for_each(|b| b.reached = vec![20]);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].message.contains("PEFT runs the trainable copy"),
            "{}",
            f[0].message
        );
        let report = s.report();
        assert!(
            report.findings.iter().all(|f| f.code != "GS102"),
            "{:#?}",
            report.findings
        );
    }

    #[test]
    fn a_head_unfrozen_after_the_optimizer_was_built_never_changes() {
        let mut s = peft(&[30, 31]);
        s.capture.optimizers[0].params = vec![20];
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].severity, Severity::Warning);
        let m = &f[0].message;
        assert!(
            m.contains("after the optimizer was built: no optimizer holds them"),
            "{m}"
        );
        assert!(f[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("modules_to_save=[\"head\"]"));
        // Told once, here, not again as parameters no optimizer holds.
        let report = s.report();
        assert!(
            report.findings.iter().all(|f| f.code != "GS106"),
            "{:#?}",
            report.findings
        );
    }

    #[test]
    fn peft_s_own_config_and_unfreezing_outside_peft_stay_quiet() {
        // Nothing unfrozen: the adapter trains as configured.
        assert!(peft(&[]).run(&CHECK).is_empty());
        // An adapter's own weights (in PEFT's per-adapter container) unfrozen by hand: an
        // adapter loaded for inference, trained on.
        let mut s = peft(&[]);
        s.module(
            5,
            "ModuleDict",
            "lora.lora_A",
            Some(3),
            ModuleKind::Registered,
            2,
        );
        s.module(
            6,
            "Linear",
            "lora.lora_A.default",
            Some(5),
            ModuleKind::Registered,
            2,
        );
        let t = s.param(21, "lora.lora_A.default.weight", 6);
        t.library_freeze = Some(peft_freeze(true));
        s.capture.optimizers[0].params.push(21);
        s.capture
            .backwards
            .iter_mut()
            .for_each(|b| b.reached.push(21));
        assert!(s.run(&CHECK).is_empty());
        // Merged back into a plain model (`merge_and_unload()`): no PEFT module is left.
        let mut s = peft(&[10, 11, 30, 31]);
        s.capture
            .modules
            .iter_mut()
            .for_each(|m| m.class_def = None);
        assert!(s.run(&CHECK).is_empty());
        // Unfrozen after a freeze by the script itself or by another library.
        for package in ["", "lightning"] {
            let mut s = peft(&[30, 31]);
            for t in &mut s.capture.tensors {
                match package {
                    "" => t.library_freeze = None,
                    p => {
                        if let Some(f) = t.library_freeze.as_mut() {
                            f.package = p.into();
                        }
                    }
                }
            }
            assert!(s.run(&CHECK).is_empty(), "{package}");
        }
    }
}
