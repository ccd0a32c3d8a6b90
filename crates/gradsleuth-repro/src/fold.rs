//! Argument folding: a call argument the script computes (`Classifier(train.x.shape[1], 5)`,
//! `open(os.path.join(args.data, "train.csv"))`, `range(args.epochs)`) becomes the literal it
//! always evaluated to (`Classifier(12, 5)`), so what it was computed from (a dataset, the
//! command line, a config file) becomes dead code that the reduction removes.
//!
//! The caller runs the script once [instrumented](instrument): every such argument is wrapped in
//! `gradsleuth._oracle.observe_value(ID, (ARG))`, which returns the value unchanged and
//! records its `repr` when it is a literal (a number, a string, a bool, None, a short tuple of
//! those), or that it is not one, or that it varied between calls (`Value::Other`). Each
//! argument seen with one literal value is then [folded](fold), the last first, and kept when
//! the oracle still shows the finding.

use ruff_python_ast::visitor::{walk_expr, walk_stmt, Visitor};
use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::Ranged;

use crate::data::Value;

/// A call argument that may be folded.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    pub id: usize,
    /// Byte range of the argument's expression.
    pub start: usize,
    pub end: usize,
}

struct Finder {
    args: Vec<Arg>,
}

/// An expression that is a literal already (or a literal's negation).
fn literal(e: &Expr) -> bool {
    match e {
        Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::BytesLiteral(_)
        | Expr::BooleanLiteral(_)
        | Expr::NoneLiteral(_)
        | Expr::EllipsisLiteral(_) => true,
        Expr::UnaryOp(u) => literal(&u.operand),
        Expr::Tuple(t) => t.elts.iter().all(literal),
        _ => false,
    }
}

impl Finder {
    fn consider(&mut self, e: &Expr) {
        let foldable = !literal(e)
            && !matches!(
                e,
                Expr::Starred(_) | Expr::Lambda(_) | Expr::Generator(_) | Expr::Named(_)
            );
        if foldable {
            self.args.push(Arg {
                id: self.args.len(),
                start: e.range().start().to_usize(),
                end: e.range().end().to_usize(),
            });
        }
    }
}

impl<'a> Visitor<'a> for Finder {
    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            // Wrapping inside an f-string's fields could clash with its quotes.
            Expr::FString(_) => return,
            Expr::Call(c) => {
                for a in &c.arguments.args {
                    self.consider(a);
                }
                for k in &c.arguments.keywords {
                    if k.arg.is_some() {
                        self.consider(&k.value);
                    }
                }
            }
            _ => {}
        }
        walk_expr(self, expr);
    }

    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        walk_stmt(self, stmt);
    }
}

/// The call arguments of `source` that may be folded, in source order; none when it does not
/// parse.
pub fn args(source: &str) -> Vec<Arg> {
    let Ok(parsed) = ruff_python_parser::parse_module(source) else {
        return Vec::new();
    };
    let mut f = Finder { args: Vec::new() };
    for s in &parsed.syntax().body {
        f.visit_stmt(s);
    }
    f.args.sort_by_key(|a| (a.start, std::cmp::Reverse(a.end)));
    for (i, a) in f.args.iter_mut().enumerate() {
        a.id = i;
    }
    f.args
}

/// `source` with every argument wrapped in an `observe_value` call that returns it unchanged.
pub fn instrument(source: &str, args: &[Arg]) -> String {
    // Insertions sorted into text order: at one offset, closings before openings; the inner
    // closing first, the outer opening first.
    let mut inserts: Vec<(usize, u8, i64, String)> = Vec::new();
    for a in args {
        let len = (a.end - a.start) as i64;
        inserts.push((
            a.start,
            1,
            -len,
            format!(
                "__import__(\"gradsleuth._oracle\", fromlist=[\"observe_value\"]).observe_value({}, (",
                a.id
            ),
        ));
        inserts.push((a.end, 0, len, "))".to_owned()));
    }
    inserts.sort_by_key(|(at, kind, rank, _)| (*at, *kind, *rank));
    let mut out = String::with_capacity(source.len() + inserts.len() * 80);
    let mut from = 0;
    for (at, _, _, text) in inserts {
        out.push_str(&source[from..at]);
        out.push_str(&text);
        from = at;
    }
    out.push_str(&source[from..]);
    out
}

/// The literal an argument always evaluated to, if it did.
pub fn constant(v: &Value) -> Option<&str> {
    match v {
        Value::Literal(s) => Some(s),
        _ => None,
    }
}

/// Folds the arguments of `source`: all at once when `keep` accepts that program (one check:
/// most constants are harmless), else one at a time, the last first, keeping each fold `keep`
/// accepts. An argument nested in one already folded is gone with it. Returns the program and
/// how many arguments were folded.
pub fn fold(
    source: &str,
    args: &[Arg],
    value_of: impl Fn(usize) -> Option<String>,
    mut keep: impl FnMut(&str) -> bool,
) -> (String, usize) {
    let (all, n) = fold_each(source, args, &value_of, |_| true);
    if n == 0 {
        return (all, 0);
    }
    if keep(&all) {
        return (all, n);
    }
    fold_each(source, args, &value_of, keep)
}

fn fold_each(
    source: &str,
    args: &[Arg],
    value_of: impl Fn(usize) -> Option<String>,
    mut keep: impl FnMut(&str) -> bool,
) -> (String, usize) {
    let mut current = source.to_owned();
    // Applied edits in the original's offsets: (start, end, change in length).
    let mut edits: Vec<(usize, usize, i64)> = Vec::new();
    let mut folded = 0;
    let mut order: Vec<&Arg> = args.iter().collect();
    order.sort_by_key(|a| (std::cmp::Reverse(a.start), a.end));
    for a in order {
        let Some(literal) = value_of(a.id) else {
            continue;
        };
        // Inside an argument folded already: nothing left to fold.
        if edits.iter().any(|&(s, e, _)| s <= a.start && a.end <= e) {
            continue;
        }
        // Edits inside this argument moved its end.
        let shift: i64 = edits
            .iter()
            .filter(|&&(s, e, _)| a.start <= s && e <= a.end)
            .map(|&(_, _, d)| d)
            .sum();
        let end = usize::try_from(a.end as i64 + shift).ok();
        let Some(end) = end.filter(|&e| e <= current.len() && a.start <= e) else {
            continue;
        };
        if current.get(a.start..end).is_none() {
            continue;
        }
        let mut candidate = String::with_capacity(current.len());
        candidate.push_str(&current[..a.start]);
        candidate.push_str(&literal);
        candidate.push_str(&current[end..]);
        if ruff_python_parser::parse_module(&candidate).is_ok() && keep(&candidate) {
            let delta = literal.len() as i64 - (end - a.start) as i64;
            // Edits inside this one are subsumed by it.
            edits.retain(|&(s, e, _)| !(a.start <= s && e <= a.end));
            edits.push((a.start, a.end, delta + shift));
            current = candidate;
            folded += 1;
        }
    }
    (current, folded)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "model = Net(train.x.shape[1], 5, act=get(cfg.act))\nfor i in range(args.n):\n    print(f\"{g(i)}\", *rest, 3, -1, (1, 2))\n";

    #[test]
    fn finds_computed_arguments_and_wraps_them_nested() {
        let a = args(SRC);
        let texts: Vec<&str> = a.iter().map(|a| &SRC[a.start..a.end]).collect();
        assert_eq!(
            texts,
            // An f-string is wrapped whole; the calls in its fields are not.
            vec![
                "train.x.shape[1]",
                "get(cfg.act)",
                "cfg.act",
                "args.n",
                "f\"{g(i)}\""
            ]
        );
        let inst = instrument(SRC, &a);
        assert!(ruff_python_parser::parse_module(&inst).is_ok(), "{inst}");
        assert!(
            inst.contains("act=__import__(\"gradsleuth._oracle\", fromlist=[\"observe_value\"]).observe_value(1, (get(__import__(\"gradsleuth._oracle\", fromlist=[\"observe_value\"]).observe_value(2, (cfg.act))))))"),
            "{inst}"
        );
    }

    #[test]
    fn folds_the_last_first_and_handles_nesting() {
        let a = args(SRC);
        let values = |id: usize| match id {
            0 => Some("12".to_owned()),
            1 => Some("'relu'".to_owned()),
            2 => Some("'gelu'".to_owned()),
            3 => Some("2".to_owned()),
            _ => None,
        };
        // Everything kept: the inner argument folds first, then the outer one over it.
        let (out, n) = fold(SRC, &a, values, |_| true);
        assert_eq!(n, 4);
        assert!(
            out.starts_with("model = Net(12, 5, act='relu')\nfor i in range(2):\n"),
            "{out}"
        );
        // The outer fold refused: the inner one stays (after the all-at-once try failed, one
        // check per argument).
        let mut checks = 0;
        let (out, n) = fold(SRC, &a, values, |c| {
            checks += 1;
            !c.contains("act='relu'")
        });
        assert_eq!((n, checks), (3, 5));
        assert!(
            out.starts_with("model = Net(12, 5, act=get('gelu'))\n"),
            "{out}"
        );
        // No value: nothing changes.
        assert_eq!(fold(SRC, &a, |_| None, |_| true), (SRC.to_owned(), 0));
    }
}
