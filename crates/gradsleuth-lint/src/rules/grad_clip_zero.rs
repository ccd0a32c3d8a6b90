//! GS308: gradient clipping with a bound of 0: a literal, a name every assignment of which is
//! 0 (`max_norm = 0.0`, a parameter defaulting to 0), or a config value whose only default is 0
//! (an argparse `default=0`, a dataclass field `clip: float = 0.0`), unless the clipping call
//! sits under a test of that very value (`if args.clip > 0:`: 0 there means "off").

use std::collections::HashMap;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Number, Stmt};

use super::Rule;
use crate::checker::{call_name, Checker};

pub const RULE: Rule = Rule { code: "GS308" };

fn is_zero(e: &Expr) -> bool {
    match e {
        Expr::NumberLiteral(n) => match &n.value {
            Number::Int(i) => i.as_u64() == Some(0),
            Number::Float(f) => *f == 0.0,
            Number::Complex { .. } => false,
        },
        _ => false,
    }
}

/// The bound a clipping call is given, if `e` is one.
fn clip_bound(e: &Expr) -> Option<&Expr> {
    let Expr::Call(c) = e else { return None };
    let name = call_name(e)?;
    let kw = if name.ends_with("clip_grad_norm_") {
        "max_norm"
    } else if name.ends_with("clip_grad_value_") {
        "clip_value"
    } else {
        return None;
    };
    c.arguments.args.get(1).or_else(|| {
        c.arguments
            .keywords
            .iter()
            .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == kw))
            .map(|k| &k.value)
    })
}

pub fn check(ck: &mut Checker, e: &Expr) {
    if !clip_bound(e).is_some_and(is_zero) {
        return;
    }
    report(ck, e);
}

fn report(ck: &mut Checker, e: &Expr) {
    let loc = ck.location(e);
    ck.report(
        RULE.finding("Clipping with a bound of 0 zeroes every gradient: nothing learns.")
            .at(Some(loc))
            .fix("Use a positive bound, e.g. `max_norm=1.0`."),
    );
}

/// What the file assigns to names and config fields: `true` while every value seen is 0.
#[derive(Default)]
struct Values<'a> {
    names: HashMap<String, bool>,
    fields: HashMap<String, bool>,
    /// Parameters without a default of the file's plain functions: (parameter, function,
    /// position). Their values are what the calls pass (`def train(model, opt, max_norm)`
    /// called as `train(model, opt, max_norm)`).
    params: Vec<(String, String, usize)>,
    /// Calls of a plain name, by name.
    calls: HashMap<String, Vec<&'a ruff_python_ast::ExprCall>>,
    /// The enclosing classes: an `__init__`'s parameters are what the class's constructions
    /// pass (`Trainer(model, opt, max_norm)`).
    classes: Vec<String>,
}

impl Values<'_> {
    /// Each parameter takes the values its function's calls pass: 0 where every call passes 0
    /// or a name that only holds 0 (the parameter's own name passed on reads as nothing new).
    /// A function never called with it, a call passing `*args`: anything.
    fn bind_parameters(&mut self) {
        let params = std::mem::take(&mut self.params);
        let mut zero: HashMap<&str, bool> = HashMap::new();
        for (p, f, i) in &params {
            let calls = self.calls.get(f).map(Vec::as_slice).unwrap_or_default();
            let args: Vec<Option<&Expr>> = calls
                .iter()
                .map(|c| {
                    if c.arguments
                        .args
                        .iter()
                        .any(|a| matches!(a, Expr::Starred(_)))
                    {
                        return None;
                    }
                    crate::checker::argument(c, p, *i)
                })
                .collect();
            let passed = !args.is_empty()
                && args.iter().all(|a| {
                    a.is_some_and(|a| match a {
                        Expr::Name(n) if n.id.as_str() == p => true,
                        Expr::Name(n) => self.names.get(n.id.as_str()) == Some(&true),
                        other => is_zero(other),
                    })
                });
            *zero.entry(p.as_str()).or_insert(true) &= passed;
        }
        for (p, z) in zero {
            *self.names.entry(p.to_owned()).or_insert(true) &= z;
        }
    }
}

impl Values<'_> {
    fn see(map: &mut HashMap<String, bool>, key: &str, value: &Expr) {
        *map.entry(key.to_owned()).or_insert(true) &= is_zero(value);
    }
}

impl<'a> Visitor<'a> for Values<'a> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::Assign(a) => {
                for t in &a.targets {
                    match t {
                        Expr::Name(n) => Self::see(&mut self.names, n.id.as_str(), &a.value),
                        Expr::Attribute(at) => {
                            Self::see(&mut self.fields, at.attr.id.as_str(), &a.value)
                        }
                        _ => {}
                    }
                }
            }
            Stmt::AnnAssign(a) => {
                if let (Expr::Name(n), Some(v)) = (a.target.as_ref(), &a.value) {
                    // A module-level name, or a dataclass/config class field.
                    Self::see(&mut self.names, n.id.as_str(), v);
                    Self::see(&mut self.fields, n.id.as_str(), v);
                }
            }
            Stmt::AugAssign(a) => {
                if let Expr::Name(n) = a.target.as_ref() {
                    self.names.insert(n.id.to_string(), false);
                }
            }
            Stmt::ClassDef(c) => {
                self.classes.push(c.name.id.to_string());
                visitor::walk_stmt(self, s);
                self.classes.pop();
                return;
            }
            Stmt::FunctionDef(f) => {
                let p = &f.parameters;
                let positional = p.posonlyargs.len() + p.args.len();
                let method = p
                    .posonlyargs
                    .iter()
                    .chain(&p.args)
                    .next()
                    .is_some_and(|a| matches!(a.parameter.name.id.as_str(), "self" | "cls"));
                // A constructor's parameters (after `self`) are what `Class(...)` passes.
                let init = match self.classes.last() {
                    Some(c) if method && f.name.id.as_str() == "__init__" => Some(c.clone()),
                    _ => None,
                };
                for (i, a) in p
                    .posonlyargs
                    .iter()
                    .chain(&p.args)
                    .chain(&p.kwonlyargs)
                    .enumerate()
                {
                    let name = a.parameter.name.id.as_str();
                    let at = |i: usize| if i < positional { i } else { usize::MAX };
                    match (&a.default, &init) {
                        (Some(d), _) => Self::see(&mut self.names, name, d),
                        (None, Some(class)) if i > 0 => self.params.push((
                            name.to_owned(),
                            class.clone(),
                            at(i).saturating_sub(1),
                        )),
                        (None, _) if !method => {
                            self.params
                                .push((name.to_owned(), f.name.id.to_string(), at(i)))
                        }
                        (None, _) => {
                            self.names.insert(name.to_owned(), false);
                        }
                    }
                }
            }
            Stmt::For(f) => {
                if let Expr::Name(n) = f.target.as_ref() {
                    self.names.insert(n.id.to_string(), false);
                }
            }
            _ => {}
        }
        visitor::walk_stmt(self, s);
    }

    fn visit_expr(&mut self, e: &'a Expr) {
        // `parser.add_argument("--max-norm", type=float, default=0.0)`: the field `max_norm`.
        if let Expr::Call(c) = e {
            if let Expr::Name(n) = c.func.as_ref() {
                self.calls.entry(n.id.to_string()).or_default().push(c);
            }
            if let Expr::Attribute(a) = c.func.as_ref() {
                if a.attr.id.as_str() == "add_argument" {
                    let kw = |k: &str| {
                        c.arguments
                            .keywords
                            .iter()
                            .find(|x| x.arg.as_ref().is_some_and(|a| a.id.as_str() == k))
                            .map(|x| &x.value)
                    };
                    let dest = match kw("dest") {
                        Some(Expr::StringLiteral(s)) => Some(s.value.to_str().to_owned()),
                        _ => c.arguments.args.iter().find_map(|a| match a {
                            Expr::StringLiteral(s) if s.value.to_str().starts_with("--") => {
                                Some(s.value.to_str().trim_start_matches('-').replace('-', "_"))
                            }
                            _ => None,
                        }),
                    };
                    if let (Some(dest), Some(d)) = (dest, kw("default")) {
                        Self::see(&mut self.fields, &dest, d);
                    }
                }
            }
            // `dict(max_norm=0.0)`, `Config(clip=0)`: keyword values are a field's values too.
            for k in &c.arguments.keywords {
                if let Some(arg) = &k.arg {
                    if self.fields.contains_key(arg.id.as_str()) {
                        Self::see(&mut self.fields, arg.id.as_str(), &k.value);
                    }
                }
            }
        }
        visitor::walk_expr(self, e);
    }
}

/// The names and fields an expression reads.
fn read_keys(e: &Expr, out: &mut Vec<String>) {
    struct Keys<'o>(&'o mut Vec<String>);
    impl<'a> Visitor<'a> for Keys<'_> {
        fn visit_expr(&mut self, e: &'a Expr) {
            match e {
                Expr::Name(n) => self.0.push(n.id.to_string()),
                Expr::Attribute(a) => self.0.push(a.attr.id.to_string()),
                _ => {}
            }
            visitor::walk_expr(self, e);
        }
    }
    Keys(out).visit_expr(e);
}

/// Clipping calls whose bound is a name or a field that only ever holds 0 (the literal case is
/// [`check`]'s), not under an `if`/`while` that tests it.
pub fn check_module(ck: &mut Checker, body: &[Stmt]) {
    let mut values = Values::default();
    for s in body {
        values.visit_stmt(s);
    }
    values.bind_parameters();
    struct Calls<'a, 'v> {
        values: &'v Values<'a>,
        guards: Vec<Vec<String>>,
        found: Vec<&'a Expr>,
    }
    impl<'a> Visitor<'a> for Calls<'a, '_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            let test = match s {
                Stmt::If(i) => Some(&*i.test),
                Stmt::While(w) => Some(&*w.test),
                _ => None,
            };
            if let Some(t) = test {
                let mut keys = Vec::new();
                read_keys(t, &mut keys);
                if let Stmt::If(i) = s {
                    for c in &i.elif_else_clauses {
                        if let Some(t) = &c.test {
                            read_keys(t, &mut keys);
                        }
                    }
                }
                self.guards.push(keys);
                visitor::walk_stmt(self, s);
                self.guards.pop();
            } else {
                visitor::walk_stmt(self, s);
            }
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Some(b) = clip_bound(e) {
                let key = match b {
                    Expr::Name(n) => self
                        .values
                        .names
                        .get(n.id.as_str())
                        .map(|z| (n.id.as_str(), *z)),
                    Expr::Attribute(a) => self
                        .values
                        .fields
                        .get(a.attr.id.as_str())
                        .map(|z| (a.attr.id.as_str(), *z)),
                    _ => None,
                };
                if let Some((k, true)) = key {
                    let guarded = self.guards.iter().flatten().any(|g| g == k);
                    // A conditional expression testing it: `max_norm if max_norm > 0 else inf`.
                    if !guarded {
                        self.found.push(e);
                    }
                }
            }
            if let Expr::If(i) = e {
                let mut keys = Vec::new();
                read_keys(&i.test, &mut keys);
                self.guards.push(keys);
                visitor::walk_expr(self, e);
                self.guards.pop();
                return;
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut calls = Calls {
        values: &values,
        guards: Vec::new(),
        found: Vec::new(),
    };
    for s in body {
        calls.visit_stmt(s);
    }
    for e in calls.found {
        report(ck, e);
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_zero_bounds() {
        let src = "torch.nn.utils.clip_grad_norm_(model.parameters(), 0)\nclip_grad_value_(ps, clip_value=0.0)\n";
        assert_eq!(codes(src), vec![("GS308".into(), 1), ("GS308".into(), 2)]);
    }

    #[test]
    fn flags_a_name_or_a_config_default_that_is_zero() {
        let src = "import argparse\nmax_norm = 0.0\nclip_grad_norm_(model.parameters(), max_norm)\np = argparse.ArgumentParser()\np.add_argument('--grad-clip', type=float, default=0)\nargs = p.parse_args()\nclip_grad_norm_(ps, max_norm=args.grad_clip)\ndef train(clip=0.0):\n    clip_grad_value_(ps, clip)\n";
        assert_eq!(
            codes(src),
            vec![
                ("GS308".into(), 3),
                ("GS308".into(), 7),
                ("GS308".into(), 9)
            ]
        );
    }

    #[test]
    fn zero_meaning_off_under_a_test_of_it_is_fine() {
        // `default=0` with `if args.clip > 0:` is the usual "0 turns clipping off".
        let src = "p.add_argument('--clip', type=float, default=0.0)\nargs = p.parse_args()\nif args.clip > 0:\n    clip_grad_norm_(ps, args.clip)\nmax_norm = 0.0\nif cfg.fast:\n    max_norm = 1.0\nclip_grad_norm_(ps, max_norm)\nclip = 0\nclip_grad_norm_(ps, clip if clip else 1.0)\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn positive_and_variable_bounds_are_fine() {
        let src = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nclip_grad_norm_(ps, max_norm=cfg.clip)\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn a_parameter_takes_what_the_calls_pass() {
        // The loop in `def train(model, opt, max_norm)`, called with the script's 0.
        let src = "max_norm = 0.0\n\ndef train(model, opt, max_norm):\n    for x in data:\n        clip_grad_norm_(model.parameters(), max_norm)\n        opt.step()\n\ntrain(model, opt, max_norm)\n";
        assert_eq!(codes(src), vec![("GS308".into(), 5)]);
        let literal = src.replace(
            "train(model, opt, max_norm)\n",
            "train(model, opt, max_norm=0)\n",
        );
        assert_eq!(codes(&literal), vec![("GS308".into(), 5)]);
        // One call passing a real bound, a call passing `*args`, or no call at all: anything.
        let other = format!("{src}train(model, opt, 1.0)\n");
        assert!(codes(&other).is_empty());
        let starred = src.replace("train(model, opt, max_norm)\n", "train(*args)\n");
        assert!(codes(&starred).is_empty());
        let uncalled = src.replace("train(model, opt, max_norm)\n", "");
        assert!(codes(&uncalled.replace("max_norm = 0.0\n", "")).is_empty());
    }
}
