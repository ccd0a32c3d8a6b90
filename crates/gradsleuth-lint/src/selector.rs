//! Selector modules: a `forward` whose every result is integer-valued (the indices of a top-k,
//! an argmax, a mask), such as a sparse-attention indexer or a router returning only its
//! choices. Nothing such a module returns can carry a gradient, whatever is recorded, so a
//! `@torch.no_grad()` on it loses nothing and a non-differentiable op on its way out is its
//! purpose, not a cut (transformers' DeepSeek-V3.2 indexer:
//! `return index_scores.topk(k, dim=-1).indices.to(torch.int32)` under `@torch.no_grad()`).
//!
//! Judged from the code alone: each `return` (outside nested functions) is integer-valued,
//! directly or through the local names it reads (every assignment of such a name must be).
//! A result cast back to a float (`x.argmax(-1).float()`, `one_hot(i).to(x.dtype)`) is not:
//! that is the shape of a bug, and the cut is reported.

use std::cell::RefCell;
use std::collections::HashMap;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Number, Stmt, StmtFunctionDef, UnaryOp};

/// Methods and functions whose result holds integers or booleans.
const INTEGER_RESULT: &[&str] = &[
    "argmax",
    "argmin",
    "argsort",
    "argwhere",
    "nonzero",
    "long",
    "int",
    "short",
    "bool",
    "searchsorted",
    "bucketize",
    "multinomial",
    "randint",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "isnan",
    "isinf",
    "isfinite",
    "logical_and",
    "logical_or",
    "logical_not",
];

/// Ops returning `(values, indices)`: element 1 is integer-valued.
const VALUES_INDICES: &[&str] = &["topk", "sort", "max", "min", "kthvalue", "mode", "median"];

/// Integer and boolean dtypes as written in a `.to(...)`.
fn integer_dtype(e: &Expr) -> bool {
    crate::checker::dotted(e).is_some_and(|d| {
        let last = d.rsplit('.').next().unwrap_or(&d);
        matches!(
            last,
            "int8" | "int16" | "int32" | "int64" | "uint8" | "long" | "int" | "short" | "bool"
        )
    })
}

/// A `.to(...)` argument that moves a tensor without changing its dtype: a device.
fn moves_only(e: &Expr) -> bool {
    matches!(e, Expr::StringLiteral(_))
        || crate::checker::dotted(e).is_some_and(|d| d == "device" || d.ends_with(".device"))
}

/// `true` when `f` is a selector: it returns something, and every result is integer-valued.
pub fn returns_only_integers(f: &StmtFunctionDef) -> bool {
    let mut scan = Scan::default();
    for s in &f.body {
        scan.visit_stmt(s);
    }
    let Scan { assigned, returns } = scan;
    let judge = Judge {
        assigned: &assigned,
        depth: 0,
        open: RefCell::new(Vec::new()),
    };
    !returns.is_empty() && returns.iter().all(|r| judge.integer(r))
}

/// What an assignment gave a name.
#[derive(Clone, Copy)]
enum Bound<'a> {
    /// `name = <expr>`
    Value(&'a Expr),
    /// the indices of `(values, indices) = x.topk(k)`
    Indices,
    /// a loop variable, an augmented assignment, an unpacked element: not judged
    Other,
}

#[derive(Default)]
struct Scan<'a> {
    /// name -> every binding of it in the function
    assigned: HashMap<&'a str, Vec<Bound<'a>>>,
    returns: Vec<&'a Expr>,
}

impl<'a> Scan<'a> {
    fn bind(&mut self, target: &'a Expr, value: Bound<'a>) {
        // An unpacked element is not the value itself.
        let value = if matches!(target, Expr::Name(_)) {
            value
        } else {
            Bound::Other
        };
        let mut names = Vec::new();
        crate::checker::bound_names(target, &mut names);
        for n in names {
            self.assigned.entry(n).or_default().push(value);
        }
    }
}

impl<'a> Visitor<'a> for Scan<'a> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::FunctionDef(_) | Stmt::ClassDef(_) => return,
            Stmt::Return(r) => {
                // A bare `return` / `return None` gives nothing a gradient could flow through.
                if let Some(v) = r.value.as_deref().filter(|v| !v.is_none_literal_expr()) {
                    self.returns.push(v);
                }
            }
            Stmt::Assign(a) => {
                for t in &a.targets {
                    match t {
                        // `v, i = x.topk(k)`: the second element holds the indices.
                        Expr::Tuple(tt) if indices_of(&a.value) && tt.elts.len() == 2 => {
                            self.bind(&tt.elts[0], Bound::Other);
                            self.bind(&tt.elts[1], Bound::Indices);
                        }
                        _ => self.bind(t, Bound::Value(&a.value)),
                    }
                }
            }
            Stmt::AnnAssign(a) => self.bind(
                &a.target,
                a.value.as_deref().map_or(Bound::Other, Bound::Value),
            ),
            Stmt::AugAssign(a) => self.bind(&a.target, Bound::Other),
            Stmt::For(f) => self.bind(&f.target, Bound::Other),
            Stmt::With(w) => {
                for item in &w.items {
                    if let Some(v) = &item.optional_vars {
                        self.bind(v, Bound::Other);
                    }
                }
            }
            _ => {}
        }
        visitor::walk_stmt(self, s);
    }

    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Named(n) = e {
            self.bind(&n.target, Bound::Value(&n.value));
        }
        if !matches!(e, Expr::Lambda(_)) {
            visitor::walk_expr(self, e);
        }
    }
}

/// `x.topk(k)`, `torch.sort(x)`, `x.max(dim=-1)`: a call returning `(values, indices)`.
fn indices_of(e: &Expr) -> bool {
    let Expr::Call(c) = e else { return false };
    let name = match c.func.as_ref() {
        Expr::Attribute(a) => a.attr.id.as_str(),
        Expr::Name(n) => n.id.as_str(),
        _ => return false,
    };
    VALUES_INDICES.contains(&name)
}

struct Judge<'m, 'a> {
    assigned: &'m HashMap<&'a str, Vec<Bound<'a>>>,
    depth: u32,
    /// Names being judged: `i = i.view(...)` reads the name it binds, and that binding is as
    /// integer as the name's others.
    open: RefCell<Vec<String>>,
}

impl Judge<'_, '_> {
    fn integer(&self, e: &Expr) -> bool {
        if self.depth > 32 {
            return false;
        }
        let deeper = Judge {
            assigned: self.assigned,
            depth: self.depth + 1,
            open: RefCell::new(self.open.borrow().clone()),
        };
        match e {
            Expr::NumberLiteral(n) => matches!(n.value, Number::Int(_)),
            Expr::BooleanLiteral(_) | Expr::Compare(_) => true,
            Expr::Attribute(a) => a.attr.id.as_str() == "indices",
            Expr::Subscript(s) => {
                // `x.topk(k)[1]`, or an element / slice of an integer tensor.
                matches!(s.slice.as_ref(), Expr::NumberLiteral(n) if matches!(&n.value, Number::Int(i) if i.as_u8() == Some(1)))
                    && indices_of(&s.value)
                    || deeper.integer(&s.value)
            }
            Expr::Tuple(t) => !t.elts.is_empty() && t.elts.iter().all(|x| deeper.integer(x)),
            Expr::UnaryOp(u) => {
                matches!(u.op, UnaryOp::Not | UnaryOp::Invert | UnaryOp::USub)
                    && deeper.integer(&u.operand)
            }
            Expr::BinOp(b) => deeper.integer(&b.left) && deeper.integer(&b.right),
            Expr::BoolOp(b) => b.values.iter().all(|x| deeper.integer(x)),
            Expr::If(i) => deeper.integer(&i.body) && deeper.integer(&i.orelse),
            Expr::Name(n) => {
                let name = n.id.as_str();
                if self.open.borrow().iter().any(|o| o == name) {
                    return true;
                }
                deeper.open.borrow_mut().push(name.to_owned());
                self.assigned.get(name).is_some_and(|vs| {
                    vs.iter().all(|v| match v {
                        Bound::Value(v) => deeper.integer(v),
                        Bound::Indices => true,
                        Bound::Other => false,
                    })
                })
            }
            Expr::Call(c) => {
                let (name, receiver) = match c.func.as_ref() {
                    Expr::Attribute(a) => (a.attr.id.as_str(), Some(a.value.as_ref())),
                    Expr::Name(n) => (n.id.as_str(), None),
                    _ => return false,
                };
                let dtype = c
                    .arguments
                    .keywords
                    .iter()
                    .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == "dtype"))
                    .map(|k| &k.value);
                match name {
                    _ if INTEGER_RESULT.contains(&name) => true,
                    // `.to(torch.int32)`; `.to(device)` keeps the receiver's dtype.
                    "to" | "type" => match c.arguments.args.first().or(dtype) {
                        Some(a) if moves_only(a) => receiver.is_some_and(|r| deeper.integer(r)),
                        Some(a) => integer_dtype(a),
                        None => false,
                    },
                    // Shape-keeping ops: integer when what they act on is.
                    "view" | "reshape" | "unsqueeze" | "squeeze" | "flatten" | "transpose"
                    | "permute" | "expand" | "contiguous" | "clone" | "detach" | "gather"
                    | "masked_fill" | "clamp" | "cpu" | "cuda" | "scatter" | "index_select"
                    | "narrow" | "repeat" | "repeat_interleave" | "roll" | "flip" => {
                        receiver.is_some_and(|r| deeper.integer(r))
                    }
                    "full_like" | "zeros_like" | "ones_like" | "empty_like" => match dtype {
                        Some(d) => integer_dtype(d),
                        None => c.arguments.args.first().is_some_and(|x| deeper.integer(x)),
                    },
                    "arange" | "full" | "zeros" | "ones" => dtype.is_some_and(integer_dtype),
                    // `torch.where(cond, a, b)`: the values of a and b.
                    "where" if c.arguments.args.len() == 3 => {
                        deeper.integer(&c.arguments.args[1]) && deeper.integer(&c.arguments.args[2])
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::returns_only_integers;
    use ruff_python_ast::Stmt;

    fn judge(body: &str) -> bool {
        let src = format!("def forward(self, x):\n{body}");
        let parsed = ruff_python_parser::parse_module(&src).unwrap();
        let Stmt::FunctionDef(f) = &parsed.syntax().body[0] else {
            unreachable!()
        };
        returns_only_integers(f)
    }

    #[test]
    fn indices_masks_and_choices_are_integer() {
        for body in [
            "    return x.topk(4, dim=-1).indices.to(torch.int32)\n",
            "    s = self.proj(x)\n    idx = s.topk(4, dim=-1).indices\n    bad = idx >= 3\n    return torch.where(bad, torch.full_like(idx, -1), idx)\n",
            "    _, idx = torch.topk(self.gate(x), 2)\n    return idx\n",
            "    return torch.sort(x)[1], (x > 0)\n",
            "    if x is None:\n        return None\n    return self.gate(x).argmax(-1)\n",
            "    i = torch.argmin(self.d(x), dim=1)\n    i = i.view(2, -1)\n    return i.to(x.device)\n",
            "    m = torch.zeros(4, dtype=torch.bool)\n    m = m.scatter(-1, x, True)[..., :3].unsqueeze(1)\n    return m\n",
        ] {
            assert!(judge(body), "{body}");
        }
    }

    #[test]
    fn values_and_results_cast_back_are_not() {
        for body in [
            "    return self.fc(x)\n",
            "    return self.fc(x).argmax(-1).float()\n",
            "    return torch.nn.functional.one_hot(x.argmax(-1), 4).to(x.dtype)\n",
            "    return x.long().to(x.dtype)\n",
            "    v, idx = x.topk(2)\n    return v, idx\n",
            "    return x.round()\n",
            "    idx = x.argmax(-1)\n    idx = self.fc(x)\n    return idx\n",
            "    pass\n",
            "    i = x.argmax(-1)\n    i = i * self.scale(x)\n    return i\n",
            "    return x.argmax(-1).to(x.dtype)\n",
        ] {
            assert!(!judge(body), "{body}");
        }
    }
}
