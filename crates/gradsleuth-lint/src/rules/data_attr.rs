//! GS306: `.data` read inside `forward`.
//!
//! A `.data` read whose value goes where autograd was never wanted is not flagged: a metadata
//! read (`w.data.dtype`), a write back into a tensor's storage (`w.data = f(w.data)`,
//! `w.data[:n] = v`, `w.data.view(-1).add_(d)`: weight surgery such as an adapter's
//! merge/unmerge), a value the author detached as well (`w.data.detach()`: the detach rule
//! judges it), a new leaf (`nn.Parameter(w.data - delta)`), module state (`self.x_min =
//! torch.min(self.x_min, x.data.min())`: running statistics) or a condition. The same holds
//! for a local name the read is assigned to, through further assignments: every use of it must
//! be one of those.

use std::collections::HashMap;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, ExprContext, Stmt, StmtFunctionDef};
use ruff_text_size::{Ranged, TextRange};

use super::Rule;
use crate::checker::{dotted, Checker};

pub const RULE: Rule = Rule { code: "GS306" };

/// Tensor attributes and methods that read metadata, not values.
const METADATA: &[&str] = &[
    "dtype",
    "device",
    "shape",
    "ndim",
    "layout",
    "is_cuda",
    "is_meta",
    "size",
    "dim",
    "numel",
    "nelement",
    "element_size",
    "data_ptr",
    "get_device",
    "is_floating_point",
    "is_contiguous",
];

/// Methods that return a view of the same storage: an in-place op after them writes through.
const VIEWS: &[&str] = &[
    "view",
    "view_as",
    "reshape",
    "reshape_as",
    "flatten",
    "t",
    "transpose",
    "permute",
    "narrow",
    "select",
    "squeeze",
    "unsqueeze",
    "expand",
    "expand_as",
    "as_strided",
];

/// Calls whose arguments become a new leaf or module state.
fn makes_leaf(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    matches!(
        last,
        "Parameter" | "register_parameter" | "register_buffer" | "Buffer"
    )
}

pub fn check(ck: &mut Checker, f: &StmtFunctionDef) {
    if !ck.in_forward()
        || !ck.source[f.range().start().to_usize()..f.range().end().to_usize()].contains(".data")
    {
        return;
    }
    let mut uses = Uses::default();
    for s in &f.body {
        uses.visit_stmt(s);
    }
    let mut hits = Vec::new();
    let mut memo = HashMap::new();
    for (range, stmt) in &uses.data_reads {
        if !harmless_use(ck.source, *range, stmt, &uses.loads, &mut memo) {
            hits.push(*range);
        }
    }
    for range in hits {
        let loc = ck.location(&range);
        ck.report(
            RULE.finding("`.data` in `forward` takes the value out of autograd: nothing before it gets a gradient through this path.")
                .at(Some(loc))
                .fix("Use the tensor itself (or `.detach()` where stopping the gradient is intended)."),
        );
    }
}

/// The `.data` reads of a function's own body (nested functions are checked on their own)
/// and every load of a local name, each with the statement holding it.
#[derive(Default)]
struct Uses<'a> {
    current: Option<&'a Stmt>,
    data_reads: Vec<(TextRange, &'a Stmt)>,
    loads: HashMap<String, Vec<(TextRange, &'a Stmt)>>,
}

impl<'a> Visitor<'a> for Uses<'a> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        if matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
            // A closure's use of a name is a use that cannot be judged here.
            let mut inner = Uses::default();
            visitor::walk_stmt(&mut inner, s);
            for (name, v) in inner.loads {
                self.loads
                    .entry(name)
                    .or_default()
                    .extend(v.into_iter().map(|(r, _)| (r, s)));
            }
            return;
        }
        let saved = self.current.replace(s);
        visitor::walk_stmt(self, s);
        self.current = saved;
    }

    fn visit_expr(&mut self, e: &'a Expr) {
        if let Some(s) = self.current {
            match e {
                Expr::Attribute(a)
                    if a.attr.id.as_str() == "data" && matches!(a.ctx, ExprContext::Load) =>
                {
                    self.data_reads.push((e.range(), s));
                }
                Expr::Name(n) if matches!(n.ctx, ExprContext::Load) => {
                    self.loads
                        .entry(n.id.to_string())
                        .or_default()
                        .push((e.range(), s));
                }
                _ => {}
            }
        }
        visitor::walk_expr(self, e);
    }
}

/// An identifier at the start of `s`.
fn ident(s: &str) -> &str {
    let n = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..n]
}

/// `s` without a leading bracketed group (`(...)` or `[...]`), or None when it does not open one.
fn skip_group(s: &str) -> Option<&str> {
    let open = s.chars().next()?;
    let close = match open {
        '(' => ')',
        '[' => ']',
        _ => return None,
    };
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(&s[i + 1..]);
            }
        }
    }
    None
}

/// What follows the value in the source makes it harmless: metadata, an explicit
/// `.detach()`, or an in-place write through it (after views and indexing).
fn harmless_suffix(rest: &str) -> bool {
    let mut rest = rest;
    loop {
        if let Some(after) = skip_group(rest).filter(|_| rest.starts_with('[')) {
            rest = after;
            continue;
        }
        let Some(call) = rest.strip_prefix('.') else {
            return false;
        };
        let name = ident(call);
        let tail = &call[name.len()..];
        if METADATA.contains(&name) || name == "detach" {
            return true;
        }
        if name.ends_with('_') && !name.starts_with('_') && tail.starts_with('(') {
            return true;
        }
        if VIEWS.contains(&name) && tail.starts_with('(') {
            match skip_group(tail) {
                Some(after) => rest = after,
                None => return false,
            }
            continue;
        }
        return false;
    }
}

/// A store into a tensor's storage (`w.data`, `w.data[...]`) or into module state (`self.x`).
fn state_target(t: &Expr) -> bool {
    match t {
        Expr::Attribute(a) => {
            a.attr.id.as_str() == "data"
                || matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self")
                || state_target(&a.value)
        }
        Expr::Subscript(s) => state_target(&s.value),
        _ => false,
    }
}

/// Does some expression within `s` satisfy `pred`?
fn any_expr(s: &Stmt, pred: impl Fn(&Expr) -> bool) -> bool {
    struct Find<F> {
        pred: F,
        found: bool,
    }
    impl<'a, F: Fn(&Expr) -> bool> Visitor<'a> for Find<F> {
        fn visit_expr(&mut self, e: &'a Expr) {
            self.found |= (self.pred)(e);
            visitor::walk_expr(self, e);
        }
    }
    let mut f = Find { pred, found: false };
    f.visit_stmt(s);
    f.found
}

/// Is `range` an argument of a call that makes a new leaf or module state?
fn in_leaf_call(s: &Stmt, range: TextRange) -> bool {
    any_expr(s, |e| {
        matches!(e, Expr::Call(c) if c.arguments.range().contains_range(range)
            && dotted(&c.func).is_some_and(|n| makes_leaf(&n)))
    })
}

/// Is `range` inside a condition within `s`: the test of a conditional expression or of a
/// comprehension (`im if im.data.contiguous else np.ascontiguousarray(im)`, YOLOv5's
/// `AutoShape`)? A condition chooses a value; no gradient flows through it.
fn in_condition(s: &Stmt, range: TextRange) -> bool {
    any_expr(s, |e| {
        let tests: Vec<&Expr> = match e {
            Expr::If(i) => vec![&i.test],
            Expr::ListComp(g) => g.generators.iter().flat_map(|c| &c.ifs).collect(),
            Expr::SetComp(g) => g.generators.iter().flat_map(|c| &c.ifs).collect(),
            Expr::DictComp(g) => g.generators.iter().flat_map(|c| &c.ifs).collect(),
            Expr::Generator(g) => g.generators.iter().flat_map(|c| &c.ifs).collect(),
            _ => Vec::new(),
        };
        tests.iter().any(|t| t.range().contains_range(range))
    })
}

/// Is the value at `range` (in statement `s`) used only where autograd was never wanted?
fn harmless_use(
    source: &str,
    range: TextRange,
    s: &Stmt,
    loads: &HashMap<String, Vec<(TextRange, &Stmt)>>,
    memo: &mut HashMap<String, bool>,
) -> bool {
    if harmless_suffix(&source[range.end().to_usize()..])
        || in_leaf_call(s, range)
        || in_condition(s, range)
    {
        return true;
    }
    // Each name is judged once (`memo`); a name met again while being judged (`x = x.data`,
    // a cycle through assignments) is not harmless.
    let name_flows = |w: &str, memo: &mut HashMap<String, bool>| -> bool {
        if let Some(ok) = memo.get(w) {
            return *ok;
        }
        memo.insert(w.to_owned(), false);
        let ok = loads.get(w).is_none_or(|v| {
            v.iter()
                .all(|(r, st)| harmless_use(source, *r, st, loads, memo))
        });
        memo.insert(w.to_owned(), ok);
        ok
    };
    match s {
        Stmt::Assign(a) => {
            if a.targets.iter().any(|t| t.range().contains_range(range)) {
                return true;
            }
            if a.targets.iter().all(state_target) {
                return true;
            }
            match a.targets.as_slice() {
                [Expr::Name(n)] => name_flows(n.id.as_str(), memo),
                _ => false,
            }
        }
        Stmt::AugAssign(a) => {
            a.target.range().contains_range(range)
                || state_target(&a.target)
                || matches!(a.target.as_ref(), Expr::Name(n) if name_flows(n.id.as_str(), memo))
        }
        Stmt::AnnAssign(a) => {
            a.target.range().contains_range(range)
                || state_target(&a.target)
                || matches!(a.target.as_ref(), Expr::Name(n) if name_flows(n.id.as_str(), memo))
        }
        Stmt::Assert(_) => true,
        Stmt::If(i) => i.test.range().contains_range(range),
        Stmt::While(w) => w.test.range().contains_range(range),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_data_reads_in_forward() {
        let src = "class M(nn.Module):\n    def forward(self, x):\n        h = self.fc(x)\n        return self.out(h.data)\n";
        assert_eq!(codes(src), vec![("GS306".into(), 4)]);
        // Through a local name into the computation.
        let src = "class M(nn.Module):\n    def forward(self, x):\n        h = self.fc(x)\n        h = h.data\n        return self.out(h)\n";
        assert_eq!(codes(src), vec![("GS306".into(), 4)]);
        let src = "class M(nn.Module):\n    def forward(self, x):\n        w = self.fc.weight.data\n        y = F.linear(x, w)\n        self.last = y\n        return y\n";
        assert_eq!(codes(src), vec![("GS306".into(), 3)]);
    }

    #[test]
    fn data_outside_forward_is_fine() {
        let src = "class M(nn.Module):\n    def reset(self):\n        self.fc.weight.data.zero_()\n    def forward(self, x):\n        self.scale.data.clamp_(min=0.1)\n        return self.data_proj(x) * self.scale\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn reads_whose_value_leaves_by_design_are_fine() {
        // An adapter merged into the base weight around the base layer's call and unmerged
        // after (PEFT's MultiheadAttention, IA3, OFT, RoAd): metadata, writes back into the
        // storage, a new frozen leaf, a restore, running statistics, a condition.
        let src = r#"class M(nn.Module):
    def merge(self):
        base = self.get_base_layer()
        dtype = base.weight.data.dtype
        base.weight.data = torch.div(base.weight.data, self.scale + 1e-8).to(dtype)
        saved = base.bias.data
        r = torch.linalg.inv(self.theta.data)
        orig = torch.matmul(r, base.weight.data)
        base.weight.data = orig.contiguous()
        old = base.weight.data - self.delta()
        base.register_parameter("weight", nn.Parameter(old, requires_grad=False))
        base.bias.data[: self.n] = saved
        base.weight.data.reshape(-1).scatter_add_(0, self.idx, self.vals)
        merged = base.weight.data.detach() + self.delta()
        return merged

    def forward(self, x):
        self.merge()
        x = x.to(self.base.weight.data.dtype)
        x_min = x.data.min()
        assert not x_min.isnan()
        if x.data.numel() == 0:
            return x
        self.x_min = torch.min(self.x_min, x_min)
        return self.base(x)
"#;
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        // A condition inside an expression: a conditional's test, a comprehension's filter.
        let src = "class M(nn.Module):\n    def forward(self, ims):\n        ims = [im if im.data.contiguous else np.ascontiguousarray(im) for im in ims]\n        xs = [x for x in ims if x.data.any()]\n        return self.net(xs)\n";
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        // The chosen value itself is no condition.
        let src = "class M(nn.Module):\n    def forward(self, x, skip):\n        h = x.data if skip else x\n        return self.net(h)\n";
        assert_eq!(codes(src), vec![("GS306".into(), 3)]);
    }
}
