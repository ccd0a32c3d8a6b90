//! Path conditions for the data flow: under which outcomes of which `if` tests a value was
//! made, or cut.
//!
//! Library code often holds alternative implementations of one computation in the arms of an
//! `if`: a fused fast path and the plain one, with and without gradient checkpointing,
//! pre-norm and post-norm, a convolutional and a linear MLP. One call runs one arm. A cut in
//! the arm that training takes is a bug even though another arm would train the submodule,
//! and a flow that merges arms cannot see it. A [`Ctx`] keeps, for each `if` test a path went
//! through, which outcomes are possible on it; a cut is reported when no differentiable use
//! of its source is [`Ctx::compatible`] with it (one call could take both paths).
//!
//! What keeps a deliberate, configurable stop-gradient quiet: a test that names the choice
//! (`if self.freeze_backbone:`, `if self.training:`, `if epoch < warmup:`, see
//! [`is_deliberate`]) constrains nothing; neither does a test inside a loop (each iteration
//! may take another arm); and a function's tests are renamed per call site, since two calls
//! may pass different arguments.

use std::collections::BTreeMap;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::Expr;

/// The test was true on the path.
pub const TRUE: u8 = 1;
/// The test was false on the path.
pub const FALSE: u8 = 2;
/// The path did not reach the test (an arm before it returned, or it sits in an arm the path
/// did not take).
pub const UNREACHED: u8 = 4;

/// A path condition: test → the outcomes possible on the path. A test absent is free.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ctx(BTreeMap<u64, u8>);

impl Ctx {
    /// This path, with `test` known to have had `outcome`.
    pub fn with(&self, test: u64, outcome: u8) -> Ctx {
        let mut c = self.clone();
        *c.0.entry(test).or_insert(TRUE | FALSE | UNREACHED) &= outcome;
        c
    }

    /// This condition with `tests` left free.
    pub fn without(&self, tests: &[u64]) -> Ctx {
        let mut c = self.clone();
        c.0.retain(|k, _| !tests.contains(k));
        c
    }

    /// Both conditions at once; `None` when no call satisfies both.
    pub fn and(&self, other: &Ctx) -> Option<Ctx> {
        let mut out = self.clone();
        for (k, v) in &other.0 {
            let e = out.0.entry(*k).or_insert(TRUE | FALSE | UNREACHED);
            *e &= v;
            if *e == 0 {
                return None;
            }
        }
        Some(out)
    }

    /// Whether one call can take both paths.
    pub fn compatible(&self, other: &Ctx) -> bool {
        self.0
            .iter()
            .all(|(k, v)| other.0.get(k).is_none_or(|w| v & w != 0))
    }

    /// Either condition (a value made on either of two paths): a test constrained by only one
    /// of them is left free, so the result is compatible with anything either is.
    pub fn either(&mut self, other: &Ctx) {
        self.0.retain(|k, v| match other.0.get(k) {
            Some(w) => {
                *v |= w;
                true
            }
            None => false,
        });
    }

    /// How much joining with `other` loses: the tests either constrains that the join
    /// leaves free or constrains less.
    fn lost_by_join(&self, other: &Ctx) -> usize {
        let mut lost = 0;
        for (k, v) in &self.0 {
            match other.0.get(k) {
                Some(w) if w == v => {}
                _ => lost += 1,
            }
        }
        lost + other.0.keys().filter(|k| !self.0.contains_key(k)).count()
    }

    /// The path after alternatives that all started from one point (the arms of an `if` that
    /// do not return): a test only some of them went through was unreached on the others.
    pub fn after(paths: &[Ctx]) -> Option<Ctx> {
        let (first, rest) = paths.split_first()?;
        let mut out = first.clone();
        for p in rest {
            for (k, v) in &p.0 {
                *out.0.entry(*k).or_insert(UNREACHED) |= v;
            }
            for (k, v) in out.0.iter_mut() {
                if !p.0.contains_key(k) {
                    *v |= UNREACHED;
                }
            }
        }
        Some(out)
    }

    /// A function's own tests as seen from one call of it: renamed for the call site (two
    /// calls may take different arms), or freed when the call repeats (inside a loop).
    pub fn at_call(&self, site: u64, repeated: bool) -> Ctx {
        if repeated {
            return Ctx::default();
        }
        Ctx(self
            .0
            .iter()
            .map(|(k, v)| (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ site, *v))
            .collect())
    }
}

/// Alternative path conditions (a value made in two arms of one `if`), kept apart up to a
/// few: `(a) or (not a and b)` must stay exclusive with `not a and not b`, which one joined
/// condition cannot say. Past `Paths::MAX` the closest are joined (compatible with more:
/// quieter).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paths(Vec<Ctx>);

impl Paths {
    const MAX: usize = 12;

    pub fn one(ctx: Ctx) -> Paths {
        Paths(vec![ctx])
    }

    /// Either these paths or `other`'s.
    pub fn or(&mut self, other: Paths) {
        for c in other.0 {
            if !self.0.contains(&c) {
                self.0.push(c);
            }
        }
        // Too many: join the two that lose least by it (those that differ only in tests
        // of a callee keep what tells the caller's arms apart).
        while self.0.len() > Self::MAX {
            let mut best = (usize::MAX, 0, 1);
            for i in 0..self.0.len() {
                for j in i + 1..self.0.len() {
                    let lost = self.0[i].lost_by_join(&self.0[j]);
                    if lost < best.0 {
                        best = (lost, i, j);
                    }
                }
            }
            let other = self.0.swap_remove(best.2);
            self.0[best.1].either(&other);
        }
    }

    /// The paths that also satisfy `ctx`; `None` when none does.
    pub fn and(&self, ctx: &Ctx) -> Option<Paths> {
        let out: Vec<Ctx> = self.0.iter().filter_map(|c| c.and(ctx)).collect();
        (!out.is_empty()).then_some(Paths(out))
    }

    /// Whether one call can take one of these paths and `ctx`.
    pub fn compatible(&self, ctx: &Ctx) -> bool {
        self.0.iter().any(|c| c.compatible(ctx))
    }

    /// One condition that holds on every one of these paths.
    pub fn joined(&self) -> Ctx {
        let mut it = self.0.iter();
        let mut out = it.next().cloned().unwrap_or_default();
        for c in it {
            out.either(c);
        }
        out
    }

    pub fn iter(&self) -> impl Iterator<Item = &Ctx> {
        self.0.iter()
    }

    /// See [`Ctx::at_call`].
    pub fn at_call(&self, site: u64, repeated: bool) -> Paths {
        let mut out = Paths::default();
        out.or(Paths(
            self.0.iter().map(|c| c.at_call(site, repeated)).collect(),
        ));
        out
    }
}

/// Words in a test that make its arms a deliberate choice of where gradients stop (freezing,
/// a training phase, a probe, an explicit stop-gradient flag) or a difference between
/// training and evaluation, rather than two implementations of one computation.
pub const DELIBERATE: &[&str] = &[
    "freeze",
    "frozen",
    "detach",
    "stop",
    "train",
    "tune",
    "probe",
    "warm",
    "stage",
    "phase",
    "epoch",
    "step",
    "iter",
    "fix",
    "requires_grad",
    "grad_enabled",
    "no_grad",
    "inference",
    "eval",
    "teacher",
    "ema",
    "momentum",
];

/// Whether an `if` test names a deliberate choice of where gradients stop (see
/// [`DELIBERATE`]): such a test constrains no path.
pub fn is_deliberate(test: &Expr) -> bool {
    // `torch.is_grad_enabled() and self.gradient_checkpointing` (diffusers' encoders),
    // `self.gradient_checkpointing and self.training`: training runs in training mode with
    // gradients on, so the other operands choose the arm, and they decide.
    if let Expr::BoolOp(b) = test {
        if b.op == ruff_python_ast::BoolOp::And {
            let rest: Vec<&Expr> = b.values.iter().filter(|v| !is_mode_probe(v)).collect();
            if !rest.is_empty() && rest.len() < b.values.len() {
                return rest.iter().any(|v| names_a_choice(v));
            }
        }
    }
    names_a_choice(test)
}

/// `self.training`, `torch.is_grad_enabled()`: true whenever a training step runs.
fn is_mode_probe(e: &Expr) -> bool {
    let name = match e {
        Expr::Call(c) if c.arguments.is_empty() => crate::checker::dotted(&c.func),
        _ => crate::checker::dotted(e),
    };
    name.is_some_and(|n| n == "self.training" || n == "torch.is_grad_enabled")
}

fn names_a_choice(test: &Expr) -> bool {
    struct Words(bool);
    impl<'a> Visitor<'a> for Words {
        fn visit_expr(&mut self, e: &'a Expr) {
            let word = match e {
                Expr::Name(n) => Some(n.id.to_ascii_lowercase()),
                Expr::Attribute(a) => Some(a.attr.id.to_ascii_lowercase()),
                Expr::StringLiteral(s) => Some(s.value.to_str().to_ascii_lowercase()),
                _ => None,
            };
            if word.is_some_and(|w| DELIBERATE.iter().any(|d| w.contains(d))) {
                self.0 = true;
            }
            visitor::walk_expr(self, e);
        }
    }
    let mut w = Words(false);
    w.visit_expr(test);
    w.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_training_mode_probe_leaves_the_choice_to_the_other_operands() {
        let parse = |src: &str| {
            ruff_python_parser::parse_expression(src)
                .map(|p| p.into_expr())
                .ok()
        };
        let deliberate = |src: &str| parse(src).is_some_and(|e| is_deliberate(&e));
        assert!(!deliberate(
            "torch.is_grad_enabled() and self.gradient_checkpointing"
        ));
        assert!(!deliberate("self.gradient_checkpointing and self.training"));
        assert!(deliberate("self.training and self.freeze_backbone"));
        assert!(deliberate("self.training"));
        assert!(deliberate("torch.is_grad_enabled()"));
        assert!(deliberate("self.training or self.gradient_checkpointing"));
    }

    #[test]
    fn arms_of_one_test_exclude_each_other() {
        let a = Ctx::default().with(1, TRUE);
        let b = Ctx::default().with(1, FALSE);
        assert!(!a.compatible(&b));
        assert!(a.and(&b).is_none());
        // A path that did not pass the test is compatible with both.
        assert!(Ctx::default().compatible(&a));
        // Either arm: compatible with both.
        let mut e = a.clone();
        e.either(&b);
        assert!(e.compatible(&a) && e.compatible(&b));
    }

    #[test]
    fn after_a_returning_arm_the_path_excludes_it() {
        // `if fast: (if ok: return ...)`, then the plain path.
        let start = Ctx::default();
        let inner_skipped = start.with(1, TRUE).with(2, FALSE);
        let outer_skipped = start.with(1, FALSE);
        let after = Ctx::after(&[inner_skipped, outer_skipped]).unwrap();
        let returned = start.with(1, TRUE).with(2, TRUE);
        assert!(!after.compatible(&returned));
    }

    #[test]
    fn tests_renamed_per_call_and_freed_in_loops() {
        let a = Ctx::default().with(1, TRUE);
        let b = Ctx::default().with(1, FALSE);
        assert!(a.at_call(10, false).compatible(&b.at_call(20, false)));
        assert!(!a.at_call(10, false).compatible(&b.at_call(10, false)));
        assert_eq!(a.at_call(10, true), Ctx::default());
    }

    #[test]
    fn alternatives_stay_apart() {
        // `if a: live; elif b: live; else: cut`.
        let first = Ctx::default().with(1, TRUE);
        let second = Ctx::default().with(1, FALSE).with(2, TRUE);
        let cut = Ctx::default().with(1, FALSE).with(2, FALSE);
        let mut live = Paths::one(first);
        live.or(Paths::one(second));
        assert!(!live.compatible(&cut));
        assert!(live.joined().compatible(&cut));
    }
}
