//! GS302: `nn.Parameter(...)` followed by `.to()`/`.double()`/arithmetic: a computed tensor.

use ruff_python_ast::{Expr, StmtAssign};

use super::Rule;
use crate::checker::{call_name, dotted, Checker};

pub const RULE: Rule = Rule { code: "GS302" };

fn is_parameter_call(e: &Expr) -> bool {
    call_name(e)
        .is_some_and(|n| n == "nn.Parameter" || n == "torch.nn.Parameter" || n == "Parameter")
}

pub fn check(ck: &mut Checker, a: &StmtAssign) {
    let [target] = a.targets.as_slice() else {
        return;
    };
    if !dotted(target).is_some_and(|n| n.starts_with("self.")) {
        return;
    }
    let op = match a.value.as_ref() {
        Expr::Call(c) => match c.func.as_ref() {
            Expr::Attribute(attr) if is_parameter_call(&attr.value) => {
                let m = attr.attr.id.as_str();
                [
                    "to", "cuda", "double", "float", "half", "bfloat16", "cpu", "type",
                ]
                .contains(&m)
                .then(|| format!(".{m}()"))
            }
            _ => None,
        },
        Expr::BinOp(b) if is_parameter_call(&b.left) || is_parameter_call(&b.right) => {
            Some("arithmetic".to_owned())
        }
        _ => None,
    };
    let Some(op) = op else { return };
    let loc = ck.location(a);
    ck.report(
        RULE.finding(format!("{op} on an nn.Parameter makes a computed tensor, not a parameter: it is not registered and never updated."))
            .at(Some(loc))
            .fix("Apply the conversion or scaling inside nn.Parameter(...): `nn.Parameter(torch.randn(n).double())`."),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_conversions_and_scaling_after_wrapping() {
        let src = "class M(nn.Module):\n    def __init__(self):\n        self.t = nn.Parameter(torch.ones(1)).double()\n        self.p = nn.Parameter(torch.randn(1, 8)) * 0.02\n";
        assert_eq!(codes(src), vec![("GS302".into(), 3), ("GS302".into(), 4)]);
    }

    #[test]
    fn wrapping_last_is_fine() {
        let src = "class M(nn.Module):\n    def __init__(self):\n        self.t = nn.Parameter(torch.ones(1).double())\n        self.p = nn.Parameter(torch.randn(1, 8) * 0.02)\n";
        assert!(codes(src).is_empty());
    }
}
