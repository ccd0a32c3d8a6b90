//! GS308: gradient clipping with a literal bound of 0.

use ruff_python_ast::{Expr, Number};

use super::Rule;
use crate::checker::{call_name, Checker};

pub const RULE: Rule = Rule { code: "GS308" };

fn is_zero(e: &Expr) -> bool {
    match e {
        Expr::NumberLiteral(n) => match &n.value {
            Number::Int(i) => i.as_u64() == Some(0),
            Number::Float(f) => *f == 0.0,
            Number::Complex { .. } => false,
        },
        _ => false,
    }
}

pub fn check(ck: &mut Checker, e: &Expr) {
    let Expr::Call(c) = e else { return };
    let Some(name) = call_name(e) else { return };
    let kw = if name.ends_with("clip_grad_norm_") {
        "max_norm"
    } else if name.ends_with("clip_grad_value_") {
        "clip_value"
    } else {
        return;
    };
    let bound = c.arguments.args.get(1).or_else(|| {
        c.arguments
            .keywords
            .iter()
            .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == kw))
            .map(|k| &k.value)
    });
    if !bound.is_some_and(is_zero) {
        return;
    }
    let loc = ck.location(e);
    ck.report(
        RULE.finding("Clipping with a bound of 0 zeroes every gradient: nothing learns.")
            .at(Some(loc))
            .fix("Use a positive bound, e.g. `max_norm=1.0`."),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_zero_bounds() {
        let src = "torch.nn.utils.clip_grad_norm_(model.parameters(), 0)\nclip_grad_value_(ps, clip_value=0.0)\n";
        assert_eq!(codes(src), vec![("GS308".into(), 1), ("GS308".into(), 2)]);
    }

    #[test]
    fn positive_and_variable_bounds_are_fine() {
        let src = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nclip_grad_norm_(ps, max_norm=cfg.clip)\n";
        assert!(codes(src).is_empty());
    }
}
