//! GS306: `.data` read inside `forward`.

use ruff_python_ast::{Expr, ExprContext};

use super::Rule;
use crate::checker::Checker;

pub const RULE: Rule = Rule { code: "GS306" };

pub fn check(ck: &mut Checker, e: &Expr) {
    let Expr::Attribute(a) = e else { return };
    if a.attr.id.as_str() != "data" || !matches!(a.ctx, ExprContext::Load) || !ck.in_forward() {
        return;
    }
    // `self.scale.data.clamp_(...)`: an in-place write through `.data` (a parameter kept in
    // range, a quantiser's statistics) takes nothing out of autograd.
    let rest = &ck.source[ruff_text_size::Ranged::range(e).end().to_usize()..];
    if let Some(call) = rest.strip_prefix('.') {
        let name: String = call
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.ends_with('_') && call[name.len()..].starts_with('(') {
            return;
        }
    }
    let loc = ck.location(e);
    ck.report(
        RULE.finding("`.data` in `forward` takes the value out of autograd: nothing before it gets a gradient through this path.")
            .at(Some(loc))
            .fix("Use the tensor itself (or `.detach()` where stopping the gradient is intended)."),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_data_reads_in_forward() {
        let src = "class M(nn.Module):\n    def forward(self, x):\n        h = self.fc(x)\n        return self.out(h.data)\n";
        assert_eq!(codes(src), vec![("GS306".into(), 4)]);
    }

    #[test]
    fn data_outside_forward_is_fine() {
        let src = "class M(nn.Module):\n    def reset(self):\n        self.fc.weight.data.zero_()\n    def forward(self, x):\n        self.scale.data.clamp_(min=0.1)\n        return self.data_proj(x) * self.scale\n";
        assert!(codes(src).is_empty());
    }
}
