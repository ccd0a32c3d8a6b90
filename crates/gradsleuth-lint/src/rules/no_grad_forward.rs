//! GS304: `@torch.no_grad()` / `@torch.inference_mode()` on a module's `forward`.

use ruff_python_ast::{Expr, StmtFunctionDef};

use super::Rule;
use crate::checker::{dotted, Checker};

pub const RULE: Rule = Rule { code: "GS304" };

pub fn check(ck: &mut Checker, f: &StmtFunctionDef) {
    // A module without parameters of its own (rotary embeddings, masks from buffers) loses
    // nothing by computing its output without recording.
    if f.name.id.as_str() != "forward" || !ck.in_module_class() || !ck.class_holds_parameters() {
        return;
    }
    for d in &f.decorator_list {
        let target = match &d.expression {
            Expr::Call(c) => dotted(&c.func),
            other => dotted(other),
        };
        if target.is_some_and(|n| n.ends_with("no_grad") || n.ends_with("inference_mode")) {
            let loc = ck.location(d);
            ck.report(
                RULE.finding("`forward` runs with gradient recording disabled: the module never gets a gradient when it is trained.")
                    .at(Some(loc))
                    .fix("Remove the decorator; wrap evaluation calls in `with torch.no_grad():` instead."),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_decorated_forward() {
        let src = "class M(nn.Module):\n    @torch.no_grad()\n    def forward(self, x):\n        return x\n";
        assert_eq!(codes(src), vec![("GS304".into(), 2)]);
    }

    #[test]
    fn a_module_without_parameters_is_fine() {
        let src = "class Rotary(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n        self.inv_freq = nn.Buffer(torch.arange(d))\n    @torch.no_grad()\n    def forward(self, x):\n        return x * self.inv_freq\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn evaluation_helpers_are_fine() {
        let src = "class M(nn.Module):\n    def forward(self, x):\n        return x\n    @torch.no_grad()\n    def predict(self, x):\n        return self(x)\n";
        assert!(codes(src).is_empty());
    }
}
