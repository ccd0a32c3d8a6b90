//! What the end of the op-level step makes of each watched tensor, before
//! [`super::OpLog::resolve`] attributes them to cuts: not reached by any backward of the step,
//! reached with an exactly-zero gradient, or reached and its gradient gone by the time the
//! step read it (a `zero_grad()` between backward and the step, or `.grad = None`).
//!
//! The host supplies, per tensor, whether a backward reached it and what is known of its
//! gradient; the norms an optimizer's step already read count first (a GAN's generator
//! stepped, then `zero_grad()`, before the discriminator's step ends the op-level step).

use rustc_hash::FxHashMap;

/// One watched tensor at the end of the step.
#[derive(Debug, Clone, Copy)]
pub struct Watched {
    pub key: u64,
    /// Its address (the op log's identity of it), or for a flat parameter's part, its key.
    pub addr: usize,
    pub reached: bool,
    /// Its gradient is still there: `Some(norm)` (the host read it, or `None` when it did not
    /// because a step's read is known), `None` when `.grad` is gone.
    pub grad: Option<Option<f64>>,
}

/// The three groups, id -> key, as [`super::OpLog::resolve`] takes them.
#[derive(Debug, Default, PartialEq)]
pub struct StepEnd {
    pub unreached: FxHashMap<usize, u64>,
    pub zero: FxHashMap<usize, u64>,
    pub cleared: FxHashMap<usize, u64>,
}

impl StepEnd {
    pub fn is_empty(&self) -> bool {
        self.unreached.is_empty() && self.zero.is_empty() && self.cleared.is_empty()
    }
}

/// Whether the host must read `key`'s gradient norm: a reached tensor with a gradient whose
/// norm no step read.
pub fn needs_norm(
    key: u64,
    reached: bool,
    has_grad: bool,
    known: &FxHashMap<u64, Option<f64>>,
) -> bool {
    reached && has_grad && !known.contains_key(&key)
}

/// Sorts `watched` tensors and a flat parameter's `parts` (`(key, reached)`, no `.grad` of
/// their own) into the groups. `known`: gradient norms the step's optimizers read (key ->
/// norm; None for one they could not read).
pub fn classify(
    watched: &[Watched],
    parts: &[(u64, bool)],
    known: &FxHashMap<u64, Option<f64>>,
) -> StepEnd {
    let mut out = StepEnd::default();
    for w in watched {
        if !w.reached {
            out.unreached.insert(w.addr, w.key);
            continue;
        }
        let norm = match (known.get(&w.key), w.grad) {
            (Some(read), _) => *read,
            (None, Some(read)) => read,
            (None, None) => {
                out.cleared.insert(w.addr, w.key);
                continue;
            }
        };
        if norm == Some(0.0) {
            out.zero.insert(w.addr, w.key);
        }
    }
    for &(key, reached) in parts {
        if !reached {
            out.unreached.insert(key as usize, key);
        } else if known.get(&key) == Some(&Some(0.0)) {
            out.zero.insert(key as usize, key);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(key: u64, reached: bool, grad: Option<Option<f64>>) -> Watched {
        Watched {
            key,
            addr: key as usize * 16,
            reached,
            grad,
        }
    }

    #[test]
    fn each_tensor_lands_in_its_group() {
        let known: FxHashMap<u64, Option<f64>> = [(4, Some(0.0)), (5, Some(2.0)), (6, None)]
            .into_iter()
            .collect();
        let end = classify(
            &[
                w(1, false, None),           // no backward reached it
                w(2, true, Some(Some(0.0))), // reached, gradient exactly zero
                w(3, true, Some(Some(1.5))), // reached, learning
                w(4, true, None),            // cleared, but its step read a zero norm
                w(5, true, None),            // cleared after its step read it: fine
                w(6, true, None),            // its step could not read it: nothing said
                w(7, true, None),            // cleared before any step read it
            ],
            &[(20, false), (21, true), (4, true)],
            &known,
        );
        assert_eq!(end.unreached, [(16, 1), (20, 20)].into_iter().collect());
        assert_eq!(end.zero, [(32, 2), (64, 4), (4, 4)].into_iter().collect());
        assert_eq!(end.cleared, [(112, 7)].into_iter().collect());
    }

    #[test]
    fn a_norm_the_step_read_wins_over_the_gradient_left() {
        // A GAN's generator: its step read a zero gradient; the discriminator's backward left
        // a non-zero one in `.grad` by the end of the op-level step.
        let known: FxHashMap<u64, Option<f64>> = [(1, Some(0.0))].into_iter().collect();
        let end = classify(&[w(1, true, Some(None))], &[], &known);
        assert_eq!(end.zero, [(16, 1)].into_iter().collect());
        assert!(needs_norm(2, true, true, &known));
        assert!(
            !needs_norm(1, true, true, &known),
            "read by its step: not read again"
        );
        assert!(!needs_norm(3, false, true, &known));
        assert!(!needs_norm(3, true, false, &known));
    }

    #[test]
    fn a_step_where_everything_learned_says_nothing() {
        let end = classify(
            &[w(1, true, Some(Some(0.3)))],
            &[(2, true)],
            &FxHashMap::default(),
        );
        assert!(end.is_empty());
    }
}
