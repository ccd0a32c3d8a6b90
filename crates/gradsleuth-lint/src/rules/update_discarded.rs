//! GS329: a hand-written update assigned to the loop variable over the parameters
//! (`for p in model.parameters(): p = p - lr * p.grad`): the assignment rebinds the name, the
//! parameter is never changed, and the new value is never read.

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt, StmtAssign, StmtFor};
use ruff_text_size::{Ranged, TextSize};

use super::Rule;
use crate::checker::Checker;

pub const RULE: Rule = Rule { code: "GS329" };

/// Whether `e` yields a model's parameters: `m.parameters()`, `list(m.parameters())`,
/// `group["params"]` (an optimizer's parameter group), a sum of such lists.
fn yields_parameters(e: &Expr) -> bool {
    match e {
        Expr::Call(c) => match c.func.as_ref() {
            Expr::Attribute(a) => a.attr.id.as_str() == "parameters",
            Expr::Name(n) if matches!(n.id.as_str(), "list" | "tuple" | "iter") => {
                c.arguments.args.first().is_some_and(yields_parameters)
            }
            _ => false,
        },
        Expr::Subscript(s) => {
            matches!(s.slice.as_ref(), Expr::StringLiteral(l) if l.value.to_str() == "params")
        }
        // `list(a.parameters()) + list(b.parameters())`
        Expr::BinOp(b) => yields_parameters(&b.left) && yields_parameters(&b.right),
        _ => false,
    }
}

/// `name = <parameters>` (`params = list(model.parameters())`): `name` is remembered as a
/// list of parameters, a whole model's when every `.parameters()` in it is a plain name's.
pub fn param_list(ck: &mut Checker, a: &StmtAssign) {
    if let ([Expr::Name(n)], true) = (a.targets.as_slice(), yields_parameters(&a.value)) {
        ck.param_lists
            .insert(n.id.to_string(), super::grad_cleared::whole(&a.value, ck));
    }
}

/// The name the loop binds to a parameter, for a loop `for <target> in <iter>`.
pub(crate) fn parameter_name<'a>(
    target: &'a Expr,
    iter: &'a Expr,
    ck: &Checker,
) -> Option<&'a str> {
    let known = |e: &Expr| matches!(e, Expr::Name(n) if ck.param_lists.contains_key(n.id.as_str()));
    if yields_parameters(iter) || known(iter) {
        return match target {
            Expr::Name(n) => Some(n.id.as_str()),
            _ => None,
        };
    }
    let Expr::Call(c) = iter else { return None };
    let Expr::Name(f) = c.func.as_ref() else {
        // `m.named_parameters()`: `(name, p)`.
        let Expr::Attribute(a) = c.func.as_ref() else {
            return None;
        };
        if a.attr.id.as_str() != "named_parameters" {
            return None;
        }
        return match target {
            Expr::Tuple(t) if t.elts.len() == 2 => match &t.elts[1] {
                Expr::Name(n) => Some(n.id.as_str()),
                _ => None,
            },
            _ => None,
        };
    };
    let Expr::Tuple(t) = target else { return None };
    match f.id.as_str() {
        // `zip(model.parameters(), grads)`: the element in the parameters' position.
        "zip" => c
            .arguments
            .args
            .iter()
            .zip(&t.elts)
            .find_map(|(a, e)| match e {
                Expr::Name(n) if yields_parameters(a) || known(a) => Some(n.id.as_str()),
                _ => None,
            }),
        // `enumerate(...)`: `(i, <target>)`.
        "enumerate" if t.elts.len() == 2 => {
            parameter_name(&t.elts[1], c.arguments.args.first()?, ck)
        }
        _ => None,
    }
}

/// Loads of `name` in a block, and its plain assignments (`name = value`), outside nested
/// functions and classes.
struct Uses<'a> {
    name: &'a str,
    loads: Vec<TextSize>,
    assigns: Vec<(&'a Stmt, &'a Expr)>,
}

impl<'a> Visitor<'a> for Uses<'a> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::FunctionDef(_) | Stmt::ClassDef(_) => return,
            Stmt::Assign(a) if matches!(a.targets.as_slice(), [Expr::Name(n)] if n.id.as_str() == self.name) =>
            {
                self.assigns.push((s, &a.value));
            }
            _ => {}
        }
        visitor::walk_stmt(self, s);
    }

    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Name(n) = e {
            if n.id.as_str() == self.name && n.ctx.is_load() {
                self.loads.push(n.range().start());
            }
        }
        visitor::walk_expr(self, e);
    }
}

/// Out-of-place tensor ops that a hand-written update means in place (`p.sub(lr * g)` for
/// `p.sub_(lr * g)`): as a statement of their own, their result is dropped.
const UPDATES: &[&str] = &[
    "add",
    "sub",
    "subtract",
    "mul",
    "multiply",
    "div",
    "divide",
    "true_divide",
    "addcmul",
    "addcdiv",
    "lerp",
    "clamp",
    "clip",
    "copy",
    "masked_fill",
];

/// `name` or `name.data`.
fn is_param(e: &Expr, name: &str) -> bool {
    match e {
        Expr::Name(n) => n.id.as_str() == name,
        Expr::Attribute(a) => a.attr.id.as_str() == "data" && is_param(&a.value, name),
        _ => false,
    }
}

/// A statement that is only an out-of-place update of `name` (`p.sub(lr * p.grad)`,
/// `p.data.add(g, alpha=-lr)`, `torch.sub(p, lr * g)`): the op's name when it is one.
fn dropped_update<'a>(s: &'a Stmt, name: &str) -> Option<&'a str> {
    let Stmt::Expr(e) = s else { return None };
    let Expr::Call(c) = e.value.as_ref() else {
        return None;
    };
    let Expr::Attribute(a) = c.func.as_ref() else {
        return None;
    };
    let op = a.attr.id.as_str();
    if !UPDATES.contains(&op) {
        return None;
    }
    let on_param = is_param(&a.value, name)
        || matches!(a.value.as_ref(), Expr::Name(m) if m.id.as_str() == "torch")
            && c.arguments.args.first().is_some_and(|x| is_param(x, name));
    on_param.then_some(op)
}

/// The first statement in a loop body (not in nested scopes) that drops an update of `name`.
struct Dropped<'a, 'b> {
    name: &'b str,
    found: Option<(&'a Stmt, &'a str)>,
}

impl<'a> Visitor<'a> for Dropped<'a, '_> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if self.found.is_some() || matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
            return;
        }
        if let Some(op) = dropped_update(s, self.name) {
            self.found = Some((s, op));
            return;
        }
        visitor::walk_stmt(self, s);
    }
}

pub fn check(ck: &mut Checker, f: &StmtFor) {
    let Some(name) = parameter_name(&f.target, &f.iter, ck) else {
        return;
    };
    let mut dropped = Dropped { name, found: None };
    visitor::walk_body(&mut dropped, &f.body);
    if let Some((stmt, op)) = dropped.found {
        let loc = ck.location(stmt);
        ck.report(
            RULE.finding(format!(
                "`.{op}(...)` computes a new tensor and drops it: the parameter `{name}` is never changed, so the weights never move."
            ))
            .at(Some(loc))
            .fix(format!(
                "Use the in-place op under `torch.no_grad()` (`{name}.{op}_(...)`), or use an optimizer."
            )),
        );
        return;
    }
    let mut uses = Uses {
        name,
        loads: Vec::new(),
        assigns: Vec::new(),
    };
    visitor::walk_body(&mut uses, &f.body);
    // The first assignment computed from the parameter whose value nothing reads afterwards.
    let discarded = uses.assigns.iter().find(|(stmt, value)| {
        let (start, end) = (value.range().start(), value.range().end());
        let reads_itself = uses.loads.iter().any(|l| *l >= start && *l < end);
        let read_later = uses.loads.iter().any(|l| *l >= stmt.range().end());
        reads_itself && !read_later
    });
    let Some((stmt, _)) = discarded else { return };
    let loc = ck.location(*stmt);
    ck.report(
        RULE.finding(format!(
            "`{name} = ...` rebinds the loop variable to a new tensor: the parameter itself is never changed, and the new value is never read, so the weights never move."
        ))
        .at(Some(loc))
        .fix(format!(
            "Update the parameter in place under `torch.no_grad()`: `{name} -= lr * {name}.grad` (or `{name}.add_({name}.grad, alpha=-lr)`, `{name}.copy_(new_value)`), or use an optimizer."
        )),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_an_update_assigned_to_the_loop_variable() {
        let src = "with torch.no_grad():\n    for p in model.parameters():\n        p = p - lr * p.grad\n";
        assert_eq!(codes(src), vec![("GS329".into(), 3)]);
        let src = "for name, w in net.named_parameters():\n    if w.grad is None:\n        continue\n    w = w - 0.1 * w.grad\n";
        assert_eq!(codes(src), vec![("GS329".into(), 4)]);
        let src = "for group in self.param_groups:\n    for p in group['params']:\n        p = p.add(p.grad, alpha=-group['lr'])\n";
        assert_eq!(codes(src), vec![("GS329".into(), 3)]);
        let src =
            "for i, (p, g) in enumerate(zip(model.parameters(), grads)):\n    p = p - lr * g\n";
        assert_eq!(codes(src), vec![("GS329".into(), 2)]);
    }

    #[test]
    fn flags_an_out_of_place_update_whose_result_is_dropped() {
        let src = "with torch.no_grad():\n    for p, g in zip(model.parameters(), grads):\n        p.sub(lr * g)\n";
        assert_eq!(codes(src), vec![("GS329".into(), 3)]);
        let src = "for p in model.parameters():\n    if p.grad is not None:\n        p.data.add(p.grad, alpha=-lr)\n";
        assert_eq!(codes(src), vec![("GS329".into(), 3)]);
        let src = "for p in model.parameters():\n    torch.sub(p, lr * p.grad)\n";
        assert_eq!(codes(src), vec![("GS329".into(), 2)]);
        // a name bound to the parameters earlier
        let src =
            "params = list(net.parameters())\nfor p, g in zip(params, grads):\n    p.sub(lr * g)\n";
        assert_eq!(codes(src), vec![("GS329".into(), 3)]);
        // in place, kept, or another tensor's op: fine
        for src in [
            "with torch.no_grad():\n    for p in model.parameters():\n        p.sub_(lr * p.grad)\n",
            "for p in model.parameters():\n    p.data.copy_(p.sub(lr * p.grad))\n",
            "for p in model.parameters():\n    p.grad.add(1)\n",
            "for x in batches:\n    x.sub(1)\n",
        ] {
            assert!(codes(src).is_empty(), "{src}");
        }
    }

    #[test]
    fn in_place_updates_and_used_values_are_fine() {
        // In place: the parameter changes.
        let src = "with torch.no_grad():\n    for p in model.parameters():\n        p -= lr * p.grad\n        p.grad.zero_()\n";
        assert!(codes(src).is_empty());
        // The new value is used (a functional inner loop, a copy back).
        let src = "fast = []\nfor p, g in zip(model.parameters(), grads):\n    p = p - lr * g\n    fast.append(p)\n";
        assert!(codes(src).is_empty());
        let src =
            "for p in model.parameters():\n    new = p - lr * p.grad\n    p.data.copy_(new)\n";
        assert!(codes(src).is_empty());
        // The gradient, not the parameter, rebound; a loop over something else.
        let src = "for p, g in zip(model.parameters(), grads):\n    g = g.clamp(-1, 1)\n    p.data.add_(g, alpha=-lr)\n";
        assert!(codes(src).is_empty());
        let src = "for x in batches:\n    x = x.to(device)\n";
        assert!(codes(src).is_empty());
    }
}
