//! GS303: `register_buffer` of a tensor meant to learn.

use ruff_python_ast::Expr;

use super::Rule;
use crate::checker::{call_name, Checker};

pub const RULE: Rule = Rule { code: "GS303" };

pub fn check(ck: &mut Checker, e: &Expr) {
    let Expr::Call(c) = e else { return };
    if !call_name(e).is_some_and(|n| n.ends_with("register_buffer")) {
        return;
    }
    let Some(value) = c.arguments.args.get(1).or_else(|| {
        c.arguments
            .keywords
            .iter()
            .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == "tensor"))
            .map(|k| &k.value)
    }) else {
        return;
    };
    let is_param = call_name(value).is_some_and(|n| n.ends_with("Parameter"));
    let requires_grad = matches!(value, Expr::Call(v) if v.arguments.keywords.iter().any(|k| {
        k.arg.as_ref().is_some_and(|a| a.id.as_str() == "requires_grad") && matches!(&k.value, Expr::BooleanLiteral(b) if b.value)
    }));
    if !(is_param || requires_grad) {
        return;
    }
    let loc = ck.location(e);
    ck.report(
        RULE.finding("A tensor meant to learn is registered as a buffer: `model.parameters()` skips buffers, so no optimizer updates it.")
            .at(Some(loc))
            .fix("Register it as a parameter: `self.name = nn.Parameter(...)`."),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_parameters_and_requires_grad_buffers() {
        let src = "class M(nn.Module):\n    def __init__(self):\n        self.register_buffer('p', nn.Parameter(torch.zeros(3)))\n        self.register_buffer('g', torch.zeros(3, requires_grad=True))\n";
        assert_eq!(codes(src), vec![("GS303".into(), 3), ("GS303".into(), 4)]);
    }

    #[test]
    fn ordinary_buffers_are_fine() {
        let src = "class M(nn.Module):\n    def __init__(self):\n        self.register_buffer('mask', torch.ones(3, requires_grad=False))\n        self.register_buffer('pos', torch.arange(8))\n";
        assert!(codes(src).is_empty());
    }
}
