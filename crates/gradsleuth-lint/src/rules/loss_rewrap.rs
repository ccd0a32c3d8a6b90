//! GS307: the loss re-made with `torch.tensor(loss.item(), requires_grad=True)`.

use ruff_python_ast::Expr;
use ruff_text_size::Ranged;

use super::Rule;
use crate::checker::{call_name, Checker};

pub const RULE: Rule = Rule { code: "GS307" };

fn contains_item_call(e: &Expr) -> bool {
    match e {
        Expr::Call(c) => {
            matches!(c.func.as_ref(), Expr::Attribute(a) if a.attr.id.as_str() == "item")
                || c.arguments.args.iter().any(contains_item_call)
        }
        Expr::List(l) => l.elts.iter().any(contains_item_call),
        Expr::ListComp(l) => contains_item_call(&l.elt),
        Expr::BinOp(b) => contains_item_call(&b.left) || contains_item_call(&b.right),
        _ => false,
    }
}

fn is_loss_name(e: &Expr) -> bool {
    crate::checker::dotted(e).is_some_and(|n| {
        let last = n.rsplit('.').next().unwrap_or(&n);
        last == "loss" || last.ends_with("_loss") || last.starts_with("loss_")
    })
}

fn report_flag(ck: &mut Checker, at: &impl ruff_text_size::Ranged) {
    let loc = ck.location(at);
    ck.report(
        RULE.finding("`requires_grad` is switched on for the loss by hand: it has no history, so backward runs without error and no parameter learns.")
            .at(Some(loc))
            .fix("Remove the line and the cut that made the loss constant (gradsleuth run names it); the loss of a working model already requires grad."),
    );
}

/// `loss.requires_grad = True`
pub fn check_assign(ck: &mut Checker, a: &ruff_python_ast::StmtAssign) {
    for t in &a.targets {
        if let Expr::Attribute(at) = t {
            if at.attr.id.as_str() == "requires_grad"
                && is_loss_name(&at.value)
                && matches!(a.value.as_ref(), Expr::BooleanLiteral(b) if b.value)
            {
                report_flag(ck, a);
            }
        }
    }
}

/// `torch.autograd.grad(outputs, inputs)` without `allow_unused=True`: it raises when an
/// input has no path to the outputs, so a loss without history fails loudly there, and
/// `loss.requires_grad_(True)` handed to it is a no-op on a loss that has one (diffusers'
/// guidance pipelines differentiate a loss with respect to the latents this way).
fn loud_grad_outputs(e: &Expr) -> Option<&Expr> {
    let Expr::Call(c) = e else { return None };
    let name = call_name(e)?;
    if !(name == "grad" || name.ends_with("autograd.grad")) {
        return None;
    }
    let unused = c.arguments.keywords.iter().any(|k| {
        k.arg
            .as_ref()
            .is_some_and(|a| a.id.as_str() == "allow_unused")
            && !matches!(&k.value, Expr::BooleanLiteral(b) if !b.value)
    });
    if unused {
        return None;
    }
    c.arguments.args.first().or_else(|| {
        c.arguments
            .keywords
            .iter()
            .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == "outputs"))
            .map(|k| &k.value)
    })
}

pub fn check(ck: &mut Checker, e: &Expr) {
    let Expr::Call(c) = e else { return };
    if let Some(outputs) = loud_grad_outputs(e) {
        ck.loud_grad_outputs.push(outputs.range());
    }
    if let Expr::Attribute(at) = c.func.as_ref() {
        if at.attr.id.as_str() == "requires_grad_"
            && !ck.loud_grad_outputs.contains(&e.range())
            && is_loss_name(&at.value)
            && !matches!(c.arguments.args.first(), Some(Expr::BooleanLiteral(b)) if !b.value)
        {
            report_flag(ck, e);
            return;
        }
    }
    if !call_name(e).is_some_and(|n| {
        matches!(
            n.as_str(),
            "torch.tensor" | "torch.as_tensor" | "torch.Tensor"
        )
    }) {
        return;
    }
    let requires_grad = c.arguments.keywords.iter().any(|k| {
        k.arg
            .as_ref()
            .is_some_and(|a| a.id.as_str() == "requires_grad")
            && matches!(&k.value, Expr::BooleanLiteral(b) if b.value)
    });
    if !requires_grad || !c.arguments.args.first().is_some_and(contains_item_call) {
        return;
    }
    let loc = ck.location(e);
    ck.report(
        RULE.finding("The loss is re-made as a new leaf from `.item()`: backward runs without error and no parameter learns.")
            .at(Some(loc))
            .fix("Call backward on the loss tensor itself, and remove the cut that made it constant (gradsleuth run names it)."),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_the_rewrap() {
        let src = "def loss_fn(p, y):\n    loss = (p - y).abs().mean()\n    return torch.tensor(loss.item(), requires_grad=True)\n";
        assert_eq!(codes(src), vec![("GS307".into(), 3)]);
    }

    #[test]
    fn flags_requires_grad_switched_on_for_the_loss() {
        let src = "loss = smoothness(model())\nloss.requires_grad_(True)\nloss.backward()\nval_loss = f(x)\nval_loss.requires_grad = True\n";
        assert_eq!(codes(src), vec![("GS307".into(), 2), ("GS307".into(), 5)]);
    }

    #[test]
    fn a_gradient_that_raises_without_history_is_loud() {
        // Guidance: the loss differentiated with respect to the latents; a loss without
        // history would raise there.
        let src = "latents.requires_grad_(True)\nloss = attention_loss(unet(latents))\ng = torch.autograd.grad(loss.requires_grad_(True), [latents])[0]\n";
        assert!(codes(src).is_empty());
        // With `allow_unused=True` it would not raise, and `backward` never does.
        let src = "g = torch.autograd.grad(loss.requires_grad_(True), params, allow_unused=True)\nloss.requires_grad_().backward()\n";
        let gs307: Vec<_> = codes(src)
            .into_iter()
            .filter(|(c, _)| c == "GS307")
            .collect();
        assert_eq!(gs307, vec![("GS307".into(), 1), ("GS307".into(), 2)]);
    }

    #[test]
    fn plain_leaves_are_fine() {
        let src = "x = torch.tensor([1.0, 2.0], requires_grad=True)\nlog = torch.tensor(loss.item())\nx.requires_grad_()\nloss.requires_grad_(False)\n";
        assert!(codes(src).is_empty());
    }
}
