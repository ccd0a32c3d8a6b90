//! GS325: parameters of a PEFT model set trainable again after PEFT froze them
//! (`get_peft_model`, `PeftModel.from_pretrained`, transformers' `add_adapter`):
//! `model.requires_grad_(True)`, a loop over its parameters setting `requires_grad = True`.
//! A loop whose condition names the adapters (`"lora_" in name`) only re-states what PEFT
//! already made trainable and is left alone.

use ruff_python_ast::{Expr, Stmt};

use super::Rule;
use crate::checker::{call_name, dotted, text_of, Checker};
use crate::path::{Ctx, FALSE, TRUE};

pub const RULE: Rule = Rule { code: "GS325" };

/// Words in a condition that select the adapters themselves.
const ADAPTER_WORDS: &[&str] = &["lora", "adapter", "ia3", "prompt", "modules_to_save"];

/// A model PEFT froze: `model = get_peft_model(...)`, `model = PeftModel.from_pretrained(...)`
/// (any `Peft*` class's), or transformers' `model.add_adapter(config)` -> "model".
fn peft_model(s: &Stmt) -> Option<String> {
    match s {
        Stmt::Assign(a) => {
            let name = call_name(&a.value)?;
            let last = name.rsplit('.').next().unwrap_or(&name);
            let loads = name
                .strip_suffix(".from_pretrained")
                .is_some_and(|c| c.rsplit('.').next().is_some_and(|c| c.contains("Peft")));
            (last == "get_peft_model" || loads)
                .then(|| a.targets.first().and_then(dotted))
                .flatten()
        }
        Stmt::Expr(e) => {
            let Expr::Call(c) = e.value.as_ref() else {
                return None;
            };
            let Expr::Attribute(a) = c.func.as_ref() else {
                return None;
            };
            (a.attr.id.as_str() == "add_adapter")
                .then(|| dotted(&a.value))
                .flatten()
        }
        _ => None,
    }
}

/// `owner` is `model` or one of its parts (`model.base_model.model.classifier`).
fn of(owner: &str, models: &[String]) -> bool {
    models.iter().any(|m| {
        owner == m
            || owner
                .strip_prefix(m.as_str())
                .is_some_and(|r| r.starts_with('.'))
    })
}

/// `x.requires_grad_()` / `x.requires_grad_(True)` -> the receiver `x`.
fn requires_grad_true_call(e: &Expr) -> Option<&Expr> {
    let Expr::Call(c) = e else { return None };
    let Expr::Attribute(a) = c.func.as_ref() else {
        return None;
    };
    let on = match c.arguments.args.first() {
        None => c
            .arguments
            .keywords
            .iter()
            .all(|k| !matches!(&k.value, Expr::BooleanLiteral(b) if !b.value)),
        Some(Expr::BooleanLiteral(b)) => b.value,
        Some(_) => false,
    };
    (a.attr.id.as_str() == "requires_grad_" && on).then_some(a.value.as_ref())
}

/// Statements in `body` (through `if`s) that set `var` trainable, unless a condition on the
/// way names the adapters.
fn sets_trainable<'a>(body: &'a [Stmt], var: &str, source: &str, out: &mut Vec<&'a Stmt>) {
    for s in body {
        match s {
            Stmt::Assign(a) => {
                let target = a.targets.iter().any(|t| {
                    matches!(t, Expr::Attribute(at) if at.attr.id.as_str() == "requires_grad"
                        && dotted(&at.value).as_deref() == Some(var))
                });
                if target && matches!(a.value.as_ref(), Expr::BooleanLiteral(b) if b.value) {
                    out.push(s);
                }
            }
            Stmt::Expr(e)
                if requires_grad_true_call(&e.value)
                    .and_then(dotted)
                    .as_deref()
                    == Some(var) =>
            {
                out.push(s);
            }
            Stmt::If(i) => {
                let lower = text_of(source, i.test.as_ref()).to_ascii_lowercase();
                if !ADAPTER_WORDS.iter().any(|w| lower.contains(w)) {
                    sets_trainable(&i.body, var, source, out);
                }
            }
            _ => {}
        }
    }
}

pub fn check(ck: &mut Checker, body: &[Stmt]) {
    visit(ck, body, &mut Vec::new(), &Ctx::default(), false);
}

/// A model PEFT froze, with the path on which it did (`if args.train_text_encoder:`).
type Frozen = (String, Ctx);

/// The statements of `body` in order, into the blocks of `if`, `with`, `try` and loops (a
/// script's `if args.unfreeze:`), with the PEFT models bound so far and the path to `body`.
///
/// An `if`'s arms are exclusive, and a script's tests read its fixed configuration: an adapter
/// added under `if args.train_text_encoder:` is not on the model in a later
/// `if args.train_text_encoder: ... elif args.train_text_encoder_ti:` arm (diffusers'
/// DreamBooth scripts train one or the other). A test is known by its text (see
/// [`crate::path`]); a test inside a loop, which may change between iterations, constrains
/// nothing (`looped`: `body` repeats).
fn visit(ck: &mut Checker, body: &[Stmt], models: &mut Vec<Frozen>, path: &Ctx, looped: bool) {
    for s in body {
        match s {
            Stmt::If(i) => {
                let mut before = path.clone();
                let tests = std::iter::once(Some(&*i.test))
                    .chain(i.elif_else_clauses.iter().map(|c| c.test.as_ref()));
                let arms =
                    std::iter::once(&i.body).chain(i.elif_else_clauses.iter().map(|c| &c.body));
                for (test, arm) in tests.zip(arms) {
                    let mut on = before.clone();
                    if let (Some(t), false) = (test, looped) {
                        let key = test_key(ck.source, t);
                        on = before.with(key, TRUE);
                        before = before.with(key, FALSE);
                    }
                    visit(ck, arm, models, &on, looped);
                }
            }
            Stmt::With(w) => visit(ck, &w.body, models, path, looped),
            Stmt::Try(t) => {
                visit(ck, &t.body, models, path, looped);
                visit(ck, &t.orelse, models, path, looped);
                visit(ck, &t.finalbody, models, path, looped);
            }
            Stmt::While(w) => visit(ck, &w.body, models, path, true),
            _ => {}
        }
        // The models PEFT froze on a path this statement can be on.
        let here: Vec<String> = models
            .iter()
            .filter(|(_, p)| p.compatible(path))
            .map(|(m, _)| m.clone())
            .collect();
        if let Stmt::For(f) = s {
            if !here.is_empty() && unfreezes(ck, s, &here) {
                continue;
            }
            visit(ck, &f.body, models, path, true);
            continue;
        }
        if let Some(m) = peft_model(s) {
            models.push((m, path.clone()));
            continue;
        }
        // Rebound to something else (`model = model.merge_and_unload()`): a plain model now.
        if let Stmt::Assign(a) = s {
            let rebound: Vec<String> = a.targets.iter().filter_map(dotted).collect();
            models.retain(|(m, _)| !rebound.contains(m));
        }
        if !here.is_empty() {
            unfreezes(ck, s, &here);
        }
    }
}

/// One `if` test's identity: its text (two tests reading the same flags are one test).
fn test_key(source: &str, test: &Expr) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text_of(source, test).hash(&mut h);
    h.finish()
}

/// Reports `s` when it sets trainable what `get_peft_model` froze in one of `models`;
/// whether it did.
fn unfreezes(ck: &mut Checker, s: &Stmt, models: &[String]) -> bool {
    let mut hits: Vec<(&Stmt, bool)> = Vec::new();
    match s {
        // `model.requires_grad_(True)`, `model.base_model.model.classifier.requires_grad_()`.
        Stmt::Expr(e) => {
            if let Some(owner) = requires_grad_true_call(&e.value).and_then(dotted) {
                if of(&owner, models) {
                    hits.push((s, models.contains(&owner)));
                }
            }
        }
        // `for p in model.parameters(): p.requires_grad = True` (or named_parameters).
        Stmt::For(f) => {
            let Expr::Call(c) = f.iter.as_ref() else {
                return false;
            };
            let Expr::Attribute(a) = c.func.as_ref() else {
                return false;
            };
            let Some(owner) = dotted(&a.value).filter(|o| of(o, models)) else {
                return false;
            };
            let var = match (a.attr.id.as_str(), f.target.as_ref()) {
                ("parameters", Expr::Name(n)) => n.id.to_string(),
                ("named_parameters", Expr::Tuple(t)) if t.elts.len() == 2 => match &t.elts[1] {
                    Expr::Name(n) => n.id.to_string(),
                    _ => return false,
                },
                _ => return false,
            };
            let mut found = Vec::new();
            sets_trainable(&f.body, &var, ck.source, &mut found);
            let whole = models.contains(&owner)
                && found
                    .iter()
                    .all(|s| f.body.iter().any(|b| std::ptr::eq(b, *s)));
            hits.extend(found.into_iter().map(|s| (s, whole)));
        }
        _ => {}
    }
    let any = !hits.is_empty();
    for (stmt, whole) in hits {
        let loc = ck.location(stmt);
        let message = if whole {
            "This unfreezes the whole model PEFT froze: the base fine-tunes in full, spending the memory and compute LoRA exists to save, and `save_pretrained` on a model with an adapter writes only the adapter's weights, so what the base learns is lost on save."
        } else {
            "Parameters PEFT froze are set trainable again: they train outside the adapter config, and `save_pretrained` on a model with an adapter writes only the adapter's weights and `modules_to_save`, so what they learn is lost on save."
        };
        let mut f = RULE
            .finding(message)
            .at(Some(loc))
            .fix("Name what trains besides the adapters in the config (`LoraConfig(..., modules_to_save=[\"classifier\"])`) and delete this line; to fine-tune the whole model, train it without `get_peft_model`.");
        f.severity = gradsleuth_model::Severity::Warning;
        ck.report(f);
    }
    any
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    const HEAD: &str = "model = get_peft_model(model, config)\n";

    #[test]
    fn flags_unfreezing_what_peft_froze() {
        for (body, line) in [
            ("model.requires_grad_(True)\n", 2),
            ("for p in model.parameters():\n    p.requires_grad = True\n", 3),
            (
                "for n, p in model.named_parameters():\n    if \"classifier\" in n:\n        p.requires_grad = True\n",
                4,
            ),
            ("model.base_model.model.classifier.requires_grad_()\n", 2),
            // Inside a block the script chose by a flag.
            (
                "if args.full:\n    for p in model.parameters():\n        p.requires_grad_(True)\n",
                4,
            ),
        ] {
            assert_eq!(
                codes(&format!("{HEAD}{body}")),
                vec![("GS325".into(), line)],
                "{body}"
            );
        }
    }

    #[test]
    fn adapters_freezing_and_models_without_peft_are_fine() {
        for body in [
            // Re-stating what PEFT made trainable.
            "for n, p in model.named_parameters():\n    if \"lora_\" in n:\n        p.requires_grad = True\n",
            // Freezing more.
            "for p in model.parameters():\n    p.requires_grad = False\n",
            "model.requires_grad_(False)\n",
            // Another model.
            "teacher.requires_grad_(True)\n",
            // Merged back into a plain model first.
            "model = model.merge_and_unload()\nmodel.requires_grad_(True)\n",
        ] {
            assert!(codes(&format!("{HEAD}{body}")).is_empty(), "{body}");
        }
        // The other ways PEFT freezes a model.
        for head in [
            "model = PeftModel.from_pretrained(base, path, is_trainable=True)\n",
            "model = AutoPeftModelForCausalLM.from_pretrained(path)\n",
            "model.add_adapter(LoraConfig(r=8))\n",
        ] {
            let src = format!("{head}model.requires_grad_(True)\n");
            assert_eq!(codes(&src), vec![("GS325".into(), 2)], "{head}");
        }
        assert!(
            codes("model = AutoModel.from_pretrained(p)\nmodel.requires_grad_(True)\n").is_empty()
        );
        // The adapter is added in one arm, the embeddings trained in another (diffusers'
        // DreamBooth: LoRA on the text encoder, or textual inversion of its token embeddings).
        let src = "if args.lora:\n    enc.add_adapter(cfg)\nelif args.ti:\n    for n, p in enc.named_parameters():\n        if 'token_embedding' in n:\n            p.requires_grad = True\n";
        assert!(codes(src).is_empty());
        // Same in a later `if` on the same flag (diffusers' Flux DreamBooth).
        let src = "if args.lora:\n    enc.add_adapter(cfg)\nif args.fp16:\n    x = 1\nif args.lora:\n    pass\nelif args.ti:\n    enc.requires_grad_(True)\n";
        assert!(codes(src).is_empty());
        // Past an `if` that may have added it, the adapter may be there; in the same arm, on
        // the same flag later, or past an `if` whose every arm adds it, it is.
        for (src, line) in [
            ("if args.lora:\n    enc.add_adapter(cfg)\nenc.requires_grad_(True)\n", 3),
            ("if args.lora:\n    enc.add_adapter(cfg)\n    enc.requires_grad_(True)\n", 3),
            ("if args.lora:\n    enc.add_adapter(cfg)\nif args.lora:\n    enc.requires_grad_(True)\n", 4),
            ("if a:\n    enc.add_adapter(c1)\nelse:\n    enc.add_adapter(c2)\nenc.requires_grad_(True)\n", 5),
        ] {
            assert_eq!(codes(src), vec![("GS325".into(), line)], "{src}");
        }
        // Progressive unfreezing without PEFT.
        let src = "for p in backbone.parameters():\n    p.requires_grad = False\nfor p in backbone.parameters():\n    p.requires_grad = True\n";
        assert!(codes(src).is_empty());
    }
}
