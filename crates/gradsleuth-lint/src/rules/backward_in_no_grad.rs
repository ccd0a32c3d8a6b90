//! GS311: `backward()` runs while gradient recording is off: inside `with torch.no_grad()`, in
//! a function decorated `@torch.no_grad()` / `@torch.inference_mode()`, or in a function of
//! the file called from either.

use std::collections::{HashMap, HashSet};

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt, StmtFunctionDef, StmtWith};
use ruff_text_size::Ranged;

use super::Rule;
use crate::checker::{disables_grad, enables_grad, Checker};

pub const RULE: Rule = Rule { code: "GS311" };

/// The first `backward()` a body runs, followed into the functions of the file it calls (each
/// once), but not into a nested `torch.enable_grad()` block (an optimizer's `step` evaluates
/// its closure under one) nor into functions it only defines.
struct FindsBackward<'a, 'd> {
    defs: &'d HashMap<String, &'a StmtFunctionDef>,
    seen: HashSet<&'a str>,
    found: Option<&'a Expr>,
}

impl<'a> FindsBackward<'a, '_> {
    fn body(&mut self, body: &'a [Stmt]) -> Option<&'a Expr> {
        visitor::walk_body(self, body);
        self.found
    }
}

impl<'a> Visitor<'a> for FindsBackward<'a, '_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        if self.found.is_some() {
            return;
        }
        if let Expr::Call(c) = e {
            match c.func.as_ref() {
                Expr::Attribute(a)
                    if matches!(a.attr.id.as_str(), "backward" | "manual_backward") =>
                {
                    self.found = Some(e);
                    return;
                }
                Expr::Name(n) => {
                    // (A function decorated `@torch.enable_grad()` records whatever calls it.)
                    if let Some(f) = self.defs.get(n.id.as_str()).copied() {
                        let records = f.decorator_list.iter().any(|d| enables_grad(&d.expression));
                        if self.seen.insert(n.id.as_str()) && !records {
                            visitor::walk_body(self, &f.body);
                        }
                    }
                }
                _ => {}
            }
        }
        visitor::walk_expr(self, e);
    }
    fn visit_stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::FunctionDef(_) | Stmt::ClassDef(_) => {}
            Stmt::With(w) if w.items.iter().any(|i| enables_grad(&i.context_expr)) => {}
            _ => visitor::walk_stmt(self, s),
        }
    }
}

fn finder<'a, 'd>(ck: &'d Checker<'a>) -> FindsBackward<'a, 'd> {
    FindsBackward {
        defs: &ck.defs,
        seen: HashSet::new(),
        found: None,
    }
}

pub fn check(ck: &mut Checker, w: &StmtWith) {
    let disables = w.items.iter().any(|i| disables_grad(&i.context_expr));
    if !disables {
        return;
    }
    // The statement of the block that leads to the backward: the backward itself, or the
    // call of the function that runs it.
    let mut found = None;
    for s in &w.body {
        let mut f = finder(ck);
        if let Some(call) = f.body(std::slice::from_ref(s)) {
            found = Some((s, call));
            break;
        }
    }
    let Some((stmt, call)) = found else { return };
    let direct = stmt.range().contains_range(call.range());
    let at = if direct {
        ck.location(call)
    } else {
        ck.location(stmt)
    };
    let mut finding = RULE
        .finding(if direct {
            "`backward()` is called inside a `no_grad`/`inference_mode` block: the loss has no history, so nothing learns."
        } else {
            "this call runs `backward()` inside a `no_grad`/`inference_mode` block: the loss has no history, so nothing learns."
        })
        .at(Some(at))
        .fix("Move the loss computation and `backward()` out of the block; keep `no_grad` for evaluation only.");
    if !direct {
        let loc = ck.location(call);
        finding = finding.related(Some(loc), "the `backward()` it runs");
    }
    ck.report(finding);
}

/// A function decorated `@torch.no_grad()` (or `@torch.inference_mode()`) that runs a
/// backward: everything it computes, the loss too, has no history.
pub fn check_function(ck: &mut Checker, f: &StmtFunctionDef) {
    let Some(d) = f
        .decorator_list
        .iter()
        .find(|d| disables_grad(&d.expression))
    else {
        return;
    };
    let mut finder = finder(ck);
    finder.seen.insert(f.name.id.as_str());
    let Some(call) = finder.body(&f.body) else {
        return;
    };
    // `loss.backward()` on a loss handed in works: the graph was recorded by the caller.
    let params = crate::flow::param_names(&f.parameters);
    if let Expr::Call(c) = call {
        if let Expr::Attribute(a) = c.func.as_ref() {
            if matches!(a.value.as_ref(), Expr::Name(n) if params.iter().any(|p| p == n.id.as_str()))
            {
                return;
            }
        }
    }
    let at = ck.location(d);
    let loc = ck.location(call);
    ck.report(
        RULE.finding(format!(
            "`{}` is decorated to disable gradient recording and runs `backward()`: the loss it computes has no history, so nothing learns.",
            f.name.id
        ))
        .at(Some(at))
        .related(Some(loc), "the `backward()` it runs")
        .fix("Remove the decorator (keep `no_grad` for evaluation functions), or wrap only the evaluation part in `with torch.no_grad():`."),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_backward_under_no_grad() {
        let src = "with torch.no_grad():\n    loss = model(x).sum()\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS311".into(), 3)]);
    }

    #[test]
    fn evaluation_blocks_are_fine() {
        let src = "with torch.no_grad():\n    acc = (model(x).argmax(1) == y).float().mean()\nloss.backward()\n";
        assert!(codes(src).is_empty());
    }

    const LOOP: &str = "import torch\nimport torch.nn.functional as F\n\nmodel = torch.nn.Linear(4, 2)\noptimizer = torch.optim.Adam(model.parameters())\n\ndef compute_loss(model, x, y):\n    return F.cross_entropy(model(x), y)\n\ndef train(x, y):\n    optimizer.zero_grad()\n    loss = compute_loss(model, x, y)\n    loss.backward()\n    optimizer.step()\n    return float(loss)\n\nfor x, y in loader:\n    train(x, y)\n";

    #[test]
    fn flags_a_training_function_decorated_to_disable_recording() {
        assert!(codes(LOOP).is_empty());
        for deco in [
            "@torch.no_grad()",
            "@torch.inference_mode()",
            "@torch.no_grad",
        ] {
            let src = LOOP.replace("def train(", &format!("{deco}\ndef train("));
            assert_eq!(codes(&src), vec![("GS311".into(), 10)], "{deco}");
        }
        // The backward in a helper the decorated function calls.
        let helper = LOOP
            .replace("    loss.backward()\n", "    update(loss)\n")
            .replace(
                "def train(",
                "def update(loss):\n    loss.backward()\n\n@torch.no_grad()\ndef train(",
            );
        assert_eq!(codes(&helper), vec![("GS311".into(), 13)]);
    }

    #[test]
    fn flags_a_training_function_called_inside_a_no_grad_block() {
        let src = LOOP.replace(
            "    train(x, y)\n",
            "    with torch.no_grad():\n        train(x, y)\n",
        );
        assert_eq!(codes(&src), vec![("GS311".into(), 19)]);
    }

    #[test]
    fn recording_turned_back_on_or_a_loss_handed_in_is_fine() {
        // An optimizer's `step` under `@torch.no_grad()` evaluates its closure under
        // `enable_grad()`; a decorated function may call backward on a loss recorded by its
        // caller; an evaluation function under `no_grad` runs no backward.
        let closure = "import torch\n\nclass SGD(torch.optim.Optimizer):\n    @torch.no_grad()\n    def step(self, closure=None):\n        with torch.enable_grad():\n            loss = closure()\n        return loss\n\ndef closure():\n    loss = model(x).sum()\n    loss.backward()\n    return loss\n";
        assert!(codes(closure).is_empty());
        let handed = "import torch\n\n@torch.no_grad()\ndef backward_and_clip(loss, model):\n    loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n";
        assert!(codes(handed).is_empty());
        let adapt = LOOP
            .replace("def train(", "@torch.enable_grad()\ndef train(")
            .replace(
                "    train(x, y)\n",
                "    with torch.no_grad():\n        train(x, y)\n",
            );
        assert!(codes(&adapt).is_empty());
        let eval = LOOP.replace("for x, y in loader:", "@torch.no_grad()\ndef evaluate(x, y):\n    return compute_loss(model, x, y)\n\nfor x, y in loader:");
        assert!(codes(&eval).is_empty());
    }
}
