//! GS315: parameters frozen with `requires_grad = False`, then all handed to an optimizer.

use ruff_python_ast::{Expr, Stmt};

use super::Rule;
use crate::checker::{call_name, dotted, text_of, Checker};

pub const RULE: Rule = Rule { code: "GS315" };

/// `for p in X.parameters(): p.requires_grad = False` -> Some("X").
fn freezes(s: &Stmt, source: &str) -> Option<String> {
    let Stmt::For(f) = s else { return None };
    let owner = match f.iter.as_ref() {
        Expr::Call(c) => match c.func.as_ref() {
            Expr::Attribute(a) if a.attr.id.as_str() == "parameters" => dotted(&a.value)?,
            _ => return None,
        },
        _ => return None,
    };
    let text = text_of(source, s);
    (text.contains("requires_grad = False")
        || text.contains("requires_grad=False")
        || text.contains("requires_grad_(False)"))
    .then_some(owner)
}

pub fn check(ck: &mut Checker, body: &[Stmt]) {
    let mut frozen: Vec<String> = Vec::new();
    for s in body {
        if let Some(owner) = freezes(s, ck.source) {
            frozen.push(owner);
            continue;
        }
        let Stmt::Assign(a) = s else { continue };
        let Expr::Call(c) = a.value.as_ref() else {
            continue;
        };
        if !call_name(&a.value)
            .is_some_and(|n| n.starts_with("torch.optim.") || n.starts_with("optim."))
        {
            continue;
        }
        let Some(Expr::Call(arg)) = c.arguments.args.first() else {
            continue;
        };
        let Expr::Attribute(attr) = arg.func.as_ref() else {
            continue;
        };
        if attr.attr.id.as_str() != "parameters" {
            continue;
        }
        if dotted(&attr.value).is_some_and(|owner| frozen.contains(&owner)) {
            let loc = ck.location(a.value.as_ref());
            let mut f = RULE
                .finding("The optimizer is built from parameters frozen just before: it holds tensors that will never be updated.")
                .at(Some(loc))
                .fix("If they should train, do not freeze them; if the freeze is intended, pass `[p for p in model.parameters() if p.requires_grad]`.");
            f.severity = gradsleuth_model::Severity::Warning;
            ck.report(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_freezing_then_optimizing_everything() {
        let src = "for p in model.parameters():\n    p.requires_grad = False\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n";
        assert_eq!(codes(src), vec![("GS315".into(), 3)]);
    }

    #[test]
    fn filtered_optimizers_are_fine() {
        let src = "for p in model.backbone.parameters():\n    p.requires_grad = False\nopt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)\n";
        assert!(codes(src).is_empty());
    }
}
