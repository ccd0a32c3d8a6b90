//! GS312: `torch.autograd.grad` without `create_graph=True` in code that then calls backward.

use ruff_python_ast::{Expr, Stmt};

use super::Rule;
use crate::checker::{call_name, text_of, Checker};

pub const RULE: Rule = Rule { code: "GS312" };

fn grad_calls<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    if let Expr::Call(c) = e {
        if call_name(e).is_some_and(|n| n == "torch.autograd.grad" || n == "autograd.grad") {
            out.push(e);
        }
        for a in c.arguments.args.iter() {
            grad_calls(a, out);
        }
    }
    if let Expr::Subscript(s) = e {
        grad_calls(&s.value, out);
    }
}

/// From the data flow: the model reaches the loss only through the gradients such a call
/// returns (computed in a loss helper, backward called elsewhere).
pub fn report_cut(ck: &mut Checker, cut: &crate::flow::FlowCut) {
    let loc = ck.location(&cut.cut.range());
    ck.report(
        RULE.finding(format!("`{}` reaches the loss only through `torch.autograd.grad` without `create_graph=True`: that term adds nothing to its gradient.", cut.source))
            .at(Some(loc))
            .fix("Pass `create_graph=True` when the gradient is part of a loss."),
    );
}

/// Called with a function body: flags grad calls without create_graph if backward follows.
pub fn check(ck: &mut Checker, body: &[Stmt]) {
    let text_has_backward = |s: &Stmt| text_of(ck.source, s).contains(".backward(");
    let mut found: Vec<&Expr> = Vec::new();
    for (i, s) in body.iter().enumerate() {
        let values: Vec<&Expr> = match s {
            Stmt::Assign(a) => vec![a.value.as_ref()],
            Stmt::Expr(e) => vec![e.value.as_ref()],
            Stmt::Return(r) => r.value.iter().map(|v| v.as_ref()).collect(),
            _ => Vec::new(),
        };
        let mut calls = Vec::new();
        for v in values {
            grad_calls(v, &mut calls);
        }
        for call in calls {
            let Expr::Call(c) = call else { continue };
            let create_graph = c.arguments.keywords.iter().any(|k| {
                k.arg
                    .as_ref()
                    .is_some_and(|a| a.id.as_str() == "create_graph")
            });
            if !create_graph && body[i + 1..].iter().any(text_has_backward) {
                found.push(call);
            }
        }
    }
    for call in found {
        let loc = ck.location(call);
        ck.report(
            RULE.finding("`torch.autograd.grad` without `create_graph=True` before `backward()`: if its result is part of the loss, that term adds nothing to the gradient.")
                .at(Some(loc))
                .fix("Pass `create_graph=True` when the gradient is part of a loss."),
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_a_force_loss_computed_in_a_helper() {
        let src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nmodel = nn.Linear(6, 1)\n\ndef compute_loss(model, batch):\n    x, forces = batch\n    x = x.clone().requires_grad_(True)\n    energy = model(x).sum()\n    (grad_x,) = torch.autograd.grad(energy, x)\n    return F.mse_loss(-grad_x, forces)\n\nopt = torch.optim.Adam(model.parameters())\nfor batch in data:\n    loss = compute_loss(model, batch)\n    loss.backward()\n";
        assert_eq!(super::super::codes(src), vec![("GS312".into(), 11)]);
    }

    #[test]
    fn a_gradient_penalty_with_create_graph_is_fine() {
        let src = "import torch\nimport torch.nn as nn\nD = nn.Linear(6, 1)\nopt = torch.optim.Adam(D.parameters())\nfor x in data:\n    x.requires_grad_(True)\n    out = D(x).sum()\n    (g,) = torch.autograd.grad(out, x, create_graph=True)\n    loss = (g.norm() - 1) ** 2\n    loss.backward()\n";
        assert!(super::super::codes(src).is_empty());
    }

    use super::super::codes;

    #[test]
    fn flags_a_penalty_without_create_graph() {
        let src = "def step(x):\n    g = torch.autograd.grad(critic(x).sum(), x)[0]\n    loss = (g.norm() - 1) ** 2\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS312".into(), 2)]);
    }

    #[test]
    fn create_graph_or_no_backward_is_fine() {
        let src = "def step(x):\n    g = torch.autograd.grad(f(x).sum(), x, create_graph=True)[0]\n    (g ** 2).mean().backward()\n\ndef probe(x):\n    return torch.autograd.grad(f(x).sum(), x)[0]\n";
        assert!(codes(src).is_empty());
    }
}
