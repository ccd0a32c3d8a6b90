//! Rewrites the reducer tries beside removals, each checked by the oracle like any candidate:
//! a variable bound once and read once, in the next statement, takes its value's place
//! (`logits = out.logits` / `loss = F.cross_entropy(logits, y)` becomes
//! `loss = F.cross_entropy(out.logits, y)`; `loss = ...` / `return loss` becomes
//! `return ...`), and a statement spread over lines that fits on one is joined (what is left of
//! `L.Trainer(\n    max_steps=3,\n)` once its other arguments went). Neither makes a line
//! longer than [`MAX_LINE`] characters.

use std::collections::{HashMap, HashSet};

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, ExprContext, Parameters, Stmt};
use ruff_text_size::Ranged;

use crate::data::bodies;

/// The longest line a rewrite may make.
pub const MAX_LINE: usize = 88;

/// Every name expression of a module: where each name is read (`Load`, or `Del`), how often it
/// is assigned, and the names bound otherwise (parameters, imports, `def`/`class`, `except ...
/// as`, `global`): those are never inlined.
#[derive(Default)]
struct Names {
    /// (name, start, end, inside a lambda or a comprehension).
    reads: Vec<(String, usize, usize, bool)>,
    stores: HashMap<String, usize>,
    bound: HashSet<String>,
    /// Depth of lambdas and comprehensions around the current expression.
    nested: usize,
    /// A `match` statement is there (its patterns bind names unseen): nothing is inlined.
    patterns: bool,
}

impl Names {
    fn parameters(&mut self, p: &Parameters) {
        for a in p
            .posonlyargs
            .iter()
            .chain(&p.args)
            .chain(&p.kwonlyargs)
            .map(|a| &a.parameter)
            .chain(p.vararg.as_deref())
            .chain(p.kwarg.as_deref())
        {
            self.bound.insert(a.name.to_string());
        }
    }
}

impl<'a> Visitor<'a> for Names {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(f) => {
                self.bound.insert(f.name.to_string());
                self.parameters(&f.parameters);
            }
            Stmt::ClassDef(c) => {
                self.bound.insert(c.name.to_string());
            }
            Stmt::Import(i) => {
                for a in &i.names {
                    let n = a.asname.as_ref().map_or_else(
                        || a.name.as_str().split('.').next().unwrap_or("").to_owned(),
                        |n| n.to_string(),
                    );
                    self.bound.insert(n);
                }
            }
            Stmt::ImportFrom(i) => {
                for a in &i.names {
                    self.bound
                        .insert(a.asname.as_ref().unwrap_or(&a.name).to_string());
                }
            }
            Stmt::Global(g) => self.bound.extend(g.names.iter().map(|n| n.to_string())),
            Stmt::Nonlocal(g) => self.bound.extend(g.names.iter().map(|n| n.to_string())),
            Stmt::Try(t) => {
                for h in &t.handlers {
                    let ruff_python_ast::ExceptHandler::ExceptHandler(h) = h;
                    if let Some(n) = &h.name {
                        self.bound.insert(n.to_string());
                    }
                }
            }
            // A pattern binds names the visitor does not show as expressions.
            Stmt::Match(_) => self.patterns = true,
            _ => {}
        }
        visitor::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(n) => match n.ctx {
                ExprContext::Store => *self.stores.entry(n.id.to_string()).or_default() += 1,
                _ => self.reads.push((
                    n.id.to_string(),
                    n.range.start().to_usize(),
                    n.range.end().to_usize(),
                    self.nested > 0,
                )),
            },
            Expr::Lambda(l) => {
                if let Some(p) = &l.parameters {
                    self.parameters(p);
                }
            }
            _ => {}
        }
        let nests = matches!(
            expr,
            Expr::Lambda(_)
                | Expr::ListComp(_)
                | Expr::SetComp(_)
                | Expr::DictComp(_)
                | Expr::Generator(_)
        );
        self.nested += usize::from(nests);
        visitor::walk_expr(self, expr);
        self.nested -= usize::from(nests);
    }
}

fn is_compound(s: &Stmt) -> bool {
    matches!(
        s,
        Stmt::FunctionDef(_)
            | Stmt::ClassDef(_)
            | Stmt::For(_)
            | Stmt::While(_)
            | Stmt::If(_)
            | Stmt::With(_)
            | Stmt::Try(_)
            | Stmt::Match(_)
    )
}

/// Whether `e`'s text can stand anywhere an expression can without parentheses.
fn is_atom(e: &Expr, text: &str) -> bool {
    match e {
        Expr::Name(_)
        | Expr::Attribute(_)
        | Expr::Call(_)
        | Expr::Subscript(_)
        | Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::BytesLiteral(_)
        | Expr::FString(_)
        | Expr::BooleanLiteral(_)
        | Expr::NoneLiteral(_)
        | Expr::EllipsisLiteral(_)
        | Expr::List(_)
        | Expr::Dict(_)
        | Expr::Set(_)
        | Expr::ListComp(_)
        | Expr::SetComp(_)
        | Expr::DictComp(_) => true,
        Expr::Tuple(_) | Expr::Generator(_) => text.starts_with('(') && text.ends_with(')'),
        _ => false,
    }
}

/// `(start of its first line, end of its last line with the newline)` when `[start, end)` is
/// alone on its lines (only indentation before it, only spaces after it).
fn own_lines(source: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
    if !source[line_start..start].trim().is_empty() {
        return None;
    }
    let line_end = source[end..]
        .find('\n')
        .map_or(source.len(), |i| end + i + 1);
    source[end..line_end]
        .trim()
        .is_empty()
        .then_some((line_start, line_end))
}

/// The line around byte `at`: `[start, end)` without its newline.
fn line_around(source: &str, at: usize) -> (usize, usize) {
    let start = source[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = source[at..].find('\n').map_or(source.len(), |i| at + i);
    (start, end)
}

/// A scope's names: the module's (the whole module counted: a function may read a global) or
/// a function's (its body, nested functions included).
struct Scope {
    names: Names,
    reads: HashMap<String, usize>,
}

impl Scope {
    fn of(body: &[Stmt], parameters: Option<&Parameters>) -> Scope {
        let mut names = Names::default();
        if let Some(p) = parameters {
            names.parameters(p);
        }
        names.visit_body(body);
        let mut reads: HashMap<String, usize> = HashMap::new();
        for (n, ..) in &names.reads {
            *reads.entry(n.clone()).or_default() += 1;
        }
        Scope { names, reads }
    }
}

/// Every single-use variable inlined, one candidate each, the last in the source first: a name
/// assigned once in its scope (a function's, or the module's) and read once there, by the
/// statement after the assignment.
pub fn inlinings(source: &str) -> Vec<String> {
    let Ok(parsed) = ruff_python_parser::parse_module(source) else {
        return Vec::new();
    };
    let body = &parsed.syntax().body;
    let mut scopes = vec![Scope::of(body, None)];
    let mut out = Vec::new();
    // (suite, its scope, a class body: its assignments are attributes, never inlined).
    let mut suites: Vec<(&[Stmt], usize, bool)> = vec![(body, 0, false)];
    while let Some((suite, scope, class)) = suites.pop() {
        for (i, s) in suite.iter().enumerate() {
            match s {
                Stmt::FunctionDef(f) => {
                    scopes.push(Scope::of(&f.body, Some(&f.parameters)));
                    suites.push((&f.body, scopes.len() - 1, false));
                }
                Stmt::ClassDef(c) => suites.push((&c.body, scope, true)),
                _ => suites.extend(bodies(s).into_iter().map(|b| (b, scope, class))),
            }
            if class {
                continue;
            }
            let Stmt::Assign(a) = s else { continue };
            let [Expr::Name(target)] = a.targets.as_slice() else {
                continue;
            };
            let Some(next) = suite.get(i + 1).filter(|n| !is_compound(n)) else {
                continue;
            };
            let name = target.id.as_str();
            let names = &scopes[scope].names;
            if names.patterns
                || names.bound.contains(name)
                || names.stores.get(name) != Some(&1)
                || scopes[scope].reads.get(name) != Some(&1)
            {
                continue;
            }
            let Some(&(_, rs, re, nested)) = names.reads.iter().find(|r| r.0 == name) else {
                continue;
            };
            if nested || rs < next.range().start().to_usize() || re > next.range().end().to_usize()
            {
                continue;
            }
            // A value spread over lines (`L.Trainer(\n    max_steps=3,\n)`) goes in on one.
            let (vs, ve) = (
                a.value.range().start().to_usize(),
                a.value.range().end().to_usize(),
            );
            let mut strings = Strings(Vec::new());
            strings.visit_expr(&a.value);
            let Some(value) = one_line(source, vs, ve, &strings.0) else {
                continue;
            };
            let value = value.as_str();
            let Some((drop_start, drop_end)) = own_lines(
                source,
                s.range().start().to_usize(),
                s.range().end().to_usize(),
            ) else {
                continue;
            };
            let text = if is_atom(&a.value, value) {
                value.to_owned()
            } else {
                format!("({value})")
            };
            let (ls, le) = line_around(source, rs);
            if le - ls - (re - rs) + text.len() > MAX_LINE {
                continue;
            }
            out.push((
                rs,
                format!(
                    "{}{}{text}{}",
                    &source[..drop_start],
                    &source[drop_end..rs],
                    &source[re..]
                ),
            ));
        }
    }
    out.sort_by_key(|b| std::cmp::Reverse(b.0));
    out.into_iter().map(|(_, s)| s).collect()
}

/// String literals' ranges in a statement.
struct Strings(Vec<(usize, usize)>);

impl<'a> Visitor<'a> for Strings {
    fn visit_expr(&mut self, expr: &'a Expr) {
        if matches!(
            expr,
            Expr::StringLiteral(_) | Expr::BytesLiteral(_) | Expr::FString(_)
        ) {
            self.0.push((
                expr.range().start().to_usize(),
                expr.range().end().to_usize(),
            ));
            return;
        }
        visitor::walk_expr(self, expr);
    }
}

/// `source[start..end]` on one line (a trailing comma before a closing bracket dropped); None
/// when it holds a comment or one of its `strings` (ranges) spans lines.
fn one_line(source: &str, start: usize, end: usize, strings: &[(usize, usize)]) -> Option<String> {
    let text = &source[start..end];
    if text.contains('#') || strings.iter().any(|&(a, b)| source[a..b].contains('\n')) {
        return None;
    }
    let mut one = String::new();
    for (k, l) in text.lines().enumerate() {
        let l = if k == 0 { l.trim_end() } else { l.trim() };
        let l = l.strip_suffix('\\').map_or(l, str::trim_end);
        if k == 0 || one.ends_with(['(', '[', '{']) {
            one.push_str(l);
        } else if l.starts_with([')', ']', '}']) {
            if one.ends_with(',') {
                one.pop();
            }
            one.push_str(l);
        } else if !l.is_empty() {
            one.push(' ');
            one.push_str(l);
        }
    }
    Some(one)
}

/// The source with every simple statement spread over lines that fits on one line of at most
/// [`MAX_LINE`] characters joined (a trailing comma before the closing bracket dropped); None
/// when there is none. Statements with a comment or a string over several lines stay.
pub fn joined(source: &str) -> Option<String> {
    let parsed = ruff_python_parser::parse_module(source).ok()?;
    let mut spans: Vec<(usize, usize, String)> = Vec::new();
    let mut suites: Vec<&[Stmt]> = vec![&parsed.syntax().body];
    while let Some(suite) = suites.pop() {
        for s in suite {
            suites.extend(bodies(s));
            if is_compound(s) {
                continue;
            }
            let (start, end) = (s.range().start().to_usize(), s.range().end().to_usize());
            if !source[start..end].contains('\n') {
                continue;
            }
            let mut strings = Strings(Vec::new());
            strings.visit_stmt(s);
            let Some(one) = one_line(source, start, end, &strings.0) else {
                continue;
            };
            let Some((line_start, _)) = own_lines(source, start, end) else {
                continue;
            };
            if start - line_start + one.len() <= MAX_LINE {
                spans.push((start, end, one));
            }
        }
    }
    if spans.is_empty() {
        return None;
    }
    spans.sort_by_key(|b| std::cmp::Reverse(b.0));
    let mut out = source.to_owned();
    for (start, end, one) in spans {
        out.replace_range(start..end, &one);
    }
    ruff_python_parser::parse_module(&out)
        .is_ok()
        .then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_read_once_in_the_next_statement_takes_the_names_place() {
        let src = "def loss_of(model, x, y):\n    out = model(x)\n    logits = out.logits\n    loss = F.cross_entropy(logits, y)\n    return loss\n";
        let all = inlinings(src);
        // The last first: `loss` into the return, then `logits`, then `out`.
        assert_eq!(
            all[0],
            "def loss_of(model, x, y):\n    out = model(x)\n    logits = out.logits\n    return F.cross_entropy(logits, y)\n"
        );
        assert_eq!(
            all[1],
            "def loss_of(model, x, y):\n    out = model(x)\n    loss = F.cross_entropy(out.logits, y)\n    return loss\n"
        );
        assert_eq!(
            all[2],
            "def loss_of(model, x, y):\n    logits = model(x).logits\n    loss = F.cross_entropy(logits, y)\n    return loss\n"
        );
        assert!(all
            .iter()
            .all(|c| ruff_python_parser::parse_module(c).is_ok()));
    }

    #[test]
    fn a_name_read_twice_bound_twice_or_used_later_stays() {
        for src in [
            // Read twice.
            "h = f(x)\ny = h + h\n",
            // Bound twice.
            "h = f(x)\ny = g(h)\nh = 2\n",
            // Read two statements later.
            "h = f(x)\nz = 1\ny = g(h)\n",
            // A parameter of the same name elsewhere.
            "h = f(x)\ny = g(h)\ndef k(h):\n    pass\n",
            // Read inside a lambda (evaluated later, maybe many times).
            "h = f(x)\ny = lambda: h\n",
            // A class attribute.
            "class A:\n    h = 1\n    y = g(h)\n",
            // A scope with a `match` (its patterns may bind the name).
            "h = f(x)\ny = g(h)\nmatch y:\n    case [h]:\n        pass\n",
            // The next statement a loop (the value would be computed each pass).
            "h = f(x)\nfor i in range(3):\n    g(h)\n",
        ] {
            assert_eq!(inlinings(src), Vec::<String>::new(), "{src}");
        }
        // Each function is its own scope; a method's locals too.
        let two = "def f(a):\n    y = g(a)\n    return y\nclass C:\n    def m(self):\n        y = 2\n        return y\n";
        assert_eq!(
            inlinings(two),
            vec![
                "def f(a):\n    y = g(a)\n    return y\nclass C:\n    def m(self):\n        return 2\n",
                "def f(a):\n    return g(a)\nclass C:\n    def m(self):\n        y = 2\n        return y\n",
            ]
        );
        // A module-level name is counted over the whole module (a function may read it).
        assert_eq!(
            inlinings("h = f(x)\ny = g(h)\ndef k():\n    return h\n"),
            Vec::<String>::new()
        );
        // A value over lines goes in on one; one with a comment stays.
        assert_eq!(
            inlinings("t = Trainer(\n    steps=3,\n)\nt.fit(m)\n"),
            vec!["Trainer(steps=3).fit(m)\n"]
        );
        assert_eq!(
            inlinings("t = Trainer(\n    steps=3,  # few\n)\nt.fit(m)\n"),
            Vec::<String>::new()
        );
        // An operator's value is parenthesised.
        assert_eq!(
            inlinings("h = a + b\ny = h * 2\n"),
            vec!["y = (a + b) * 2\n"]
        );
    }

    #[test]
    fn a_statement_over_lines_is_joined_when_it_fits() {
        let src = "trainer = L.Trainer(\n    max_steps=3,\n)\nx = [\n    1,\n    2]\nif a:\n    y = f(a,\n          b)\ns = (\"a\"\n     \"b\")\nt = '''x\ny'''\nz = g(1,  # why\n      2)\n";
        assert_eq!(
            joined(src).unwrap(),
            "trainer = L.Trainer(max_steps=3)\nx = [1, 2]\nif a:\n    y = f(a, b)\ns = (\"a\"\n     \"b\")\nt = '''x\ny'''\nz = g(1,  # why\n      2)\n"
        );
        assert_eq!(joined("x = 1\n"), None);
        let long = format!("x = f(\n    {},\n)\n", "a".repeat(90));
        assert_eq!(joined(&long), None);
    }
}
