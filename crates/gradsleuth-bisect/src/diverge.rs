//! The first op whose result differs between two runs of the same step (the last good and
//! the first bad environment), from their op digests (shape, dtype, float64 sum and norm of
//! every tensor an op returned, with the user's line that called it).
//!
//! The two op sequences are walked side by side. Ops are paired by (op, line); where one
//! environment calls ops the other does not (a function that became a composite, a check a
//! release added) the walk resynchronises on the next pair that matches within a small
//! window, and those unpaired ops are counted, not reported: only a paired op whose outputs
//! differ is a divergence, since an input that differed would have made an earlier op
//! differ first. When no paired op differs but the sequences part for good, the first op
//! that has no partner is reported.

use gradsleuth_model::capture::{OpDigest, TensorDigest};
use serde::{Deserialize, Serialize};

use crate::predicate::same_value;

/// How far ahead the walk looks for the partner of an op.
const WINDOW: usize = 16;

/// Why two ops' results count as different.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Difference {
    Shape,
    Dtype,
    Value,
    /// A different number of tensor outputs.
    Outputs,
    /// Only one environment called this op (and the two runs never met again).
    Unpaired,
}

/// The first op whose result differs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    pub difference: Difference,
    /// 0-based position of the op in the good run's step and in the bad run's.
    pub good_index: Option<usize>,
    pub bad_index: Option<usize>,
    /// The op as the good run recorded it, and the bad run.
    pub good: Option<OpDigest>,
    pub bad: Option<OpDigest>,
    /// Which output differs (0-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<usize>,
    /// Ops before it that one run called and the other did not.
    pub unpaired_before: usize,
    /// Ops paired and equal before it.
    pub equal_before: usize,
}

impl Divergence {
    /// The op's name and line, from whichever side has it.
    pub fn op(&self) -> &OpDigest {
        self.bad
            .as_ref()
            .or(self.good.as_ref())
            .expect("a divergence has an op")
    }
}

fn key(d: &OpDigest) -> (&str, Option<(&str, u32)>) {
    (
        d.op.as_str(),
        d.location.as_ref().map(|l| (l.file.as_str(), l.line)),
    )
}

fn tensor_difference(a: &TensorDigest, b: &TensorDigest, rel_tol: f64) -> Option<Difference> {
    if a.shape != b.shape {
        return Some(Difference::Shape);
    }
    if a.dtype != b.dtype {
        return Some(Difference::Dtype);
    }
    // The sum can cancel to near zero: scale its tolerance by the norm.
    let scale = a.norm.abs().max(b.norm.abs());
    let sum_same = same_value(a.sum, b.sum, rel_tol)
        || (a.sum.is_finite() && b.sum.is_finite() && (a.sum - b.sum).abs() <= rel_tol * scale);
    (!(sum_same && same_value(a.norm, b.norm, rel_tol))).then_some(Difference::Value)
}

fn op_difference(a: &OpDigest, b: &OpDigest, rel_tol: f64) -> Option<(Difference, Option<usize>)> {
    if a.outputs.len() != b.outputs.len() {
        return Some((Difference::Outputs, None));
    }
    a.outputs
        .iter()
        .zip(&b.outputs)
        .enumerate()
        .find_map(|(i, (x, y))| tensor_difference(x, y, rel_tol).map(|d| (d, Some(i))))
}

/// The first paired op whose outputs differ by more than `rel_tol` (relative, on the float64
/// sum and norm), else the first op left unpaired for good; None when the steps agree.
pub fn first_divergence(good: &[OpDigest], bad: &[OpDigest], rel_tol: f64) -> Option<Divergence> {
    let (mut i, mut j) = (0usize, 0usize);
    let mut unpaired = 0usize;
    let mut equal = 0usize;
    let mut first_unpaired: Option<(Option<usize>, Option<usize>)> = None;
    // Where the two runs first call different ops at the same place (a swapped op): when
    // values differ after it, the swap is where they parted.
    let mut swap: Option<(usize, usize)> = None;
    while i < good.len() && j < bad.len() {
        if key(&good[i]) == key(&bad[j]) {
            if let Some((difference, output)) = op_difference(&good[i], &bad[j], rel_tol) {
                if let Some((gi, bj)) = swap {
                    return Some(parted(good, bad, Some(gi), Some(bj), equal));
                }
                return Some(Divergence {
                    difference,
                    good_index: Some(i),
                    bad_index: Some(j),
                    good: Some(good[i].clone()),
                    bad: Some(bad[j].clone()),
                    output,
                    unpaired_before: unpaired,
                    equal_before: equal,
                });
            }
            equal += 1;
            i += 1;
            j += 1;
            continue;
        }
        // Resynchronise: the nearest partner of either op within the window.
        let ahead_bad =
            (j + 1..(j + WINDOW).min(bad.len())).find(|&k| key(&bad[k]) == key(&good[i]));
        let ahead_good =
            (i + 1..(i + WINDOW).min(good.len())).find(|&k| key(&good[k]) == key(&bad[j]));
        // The side whose ops are skipped is the side that called ops the other did not.
        match (ahead_good, ahead_bad) {
            (Some(gi), Some(bj)) if gi - i <= bj - j => {
                first_unpaired.get_or_insert((Some(i), None));
                unpaired += gi - i;
                i = gi;
            }
            (_, Some(bj)) => {
                first_unpaired.get_or_insert((None, Some(j)));
                unpaired += bj - j;
                j = bj;
            }
            (Some(gi), None) => {
                first_unpaired.get_or_insert((Some(i), None));
                unpaired += gi - i;
                i = gi;
            }
            (None, None) => {
                first_unpaired.get_or_insert((Some(i), Some(j)));
                swap.get_or_insert((i, j));
                unpaired += 2;
                i += 1;
                j += 1;
            }
        }
    }
    let rest = (good.len() - i) + (bad.len() - j);
    if rest == 0 && first_unpaired.is_none() {
        return None;
    }
    let (gi, bj) =
        first_unpaired.unwrap_or(((i < good.len()).then_some(i), (j < bad.len()).then_some(j)));
    Some(parted(good, bad, gi, bj, equal))
}

/// Where the two runs part: the op each calls there (None: that run calls nothing there).
fn parted(
    good: &[OpDigest],
    bad: &[OpDigest],
    gi: Option<usize>,
    bj: Option<usize>,
    equal_before: usize,
) -> Divergence {
    Divergence {
        difference: Difference::Unpaired,
        good_index: gi,
        bad_index: bj,
        good: gi.and_then(|k| good.get(k).cloned()),
        bad: bj.and_then(|k| bad.get(k).cloned()),
        output: None,
        unpaired_before: 0,
        equal_before,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradsleuth_model::Location;

    fn op(name: &str, line: u32, values: &[(f64, f64)]) -> OpDigest {
        OpDigest {
            op: name.into(),
            location: Some(Location::new("/job/train.py", line)),
            outputs: values
                .iter()
                .map(|&(sum, norm)| TensorDigest {
                    shape: vec![4, 4],
                    dtype: "torch.float32".into(),
                    sum,
                    norm,
                })
                .collect(),
        }
    }

    #[test]
    fn equal_steps_do_not_diverge() {
        let a = vec![
            op("linear", 10, &[(1.0, 2.0)]),
            op("relu", 11, &[(0.5, 1.0)]),
        ];
        assert_eq!(first_divergence(&a, &a.clone(), 1e-6), None);
        // Float noise below the tolerance is not a difference.
        let b = vec![
            op("linear", 10, &[(1.0 + 1e-9, 2.0)]),
            op("relu", 11, &[(0.5, 1.0)]),
        ];
        assert_eq!(first_divergence(&a, &b, 1e-6), None);
    }

    #[test]
    fn names_the_first_op_whose_value_differs_with_both_values() {
        let good = vec![
            op("linear", 10, &[(1.0, 2.0)]),
            op("softmax", 11, &[(4.0, 1.5)]),
            op("mse_loss", 12, &[(0.3, 0.3)]),
        ];
        let mut bad = good.clone();
        bad[1].outputs[0].sum = 3.0;
        bad[2].outputs[0].sum = 0.9;
        let d = first_divergence(&good, &bad, 1e-6).expect("differs");
        assert_eq!(d.difference, Difference::Value);
        assert_eq!(
            (d.good_index, d.bad_index, d.output),
            (Some(1), Some(1), Some(0))
        );
        assert_eq!(d.op().op, "softmax");
        assert_eq!(d.good.unwrap().outputs[0].sum, 4.0);
        assert_eq!(d.bad.unwrap().outputs[0].sum, 3.0);
        assert_eq!(d.equal_before, 1);
    }

    #[test]
    fn ops_only_one_release_calls_are_stepped_over() {
        // The bad release calls an extra `contiguous` and a shape check before the op that
        // differs: the divergence is still the op that differs, not the extra calls.
        let good = vec![
            op("linear", 10, &[(1.0, 2.0)]),
            op("gelu", 11, &[(2.0, 3.0)]),
        ];
        let bad = vec![
            op("linear", 10, &[(1.0, 2.0)]),
            op("contiguous", 11, &[(1.0, 2.0)]),
            op("size", 11, &[]),
            op("gelu", 11, &[(2.5, 3.0)]),
        ];
        let d = first_divergence(&good, &bad, 1e-6).expect("differs");
        assert_eq!(d.op().op, "gelu");
        assert_eq!(d.difference, Difference::Value);
        assert_eq!(d.unpaired_before, 2);
        assert_eq!((d.good_index, d.bad_index), (Some(1), Some(3)));
    }

    #[test]
    fn a_swapped_op_is_where_the_runs_part_not_the_values_after_it() {
        let good = vec![
            op("linear", 9, &[(1.0, 2.0)]),
            op("relu", 9, &[(0.5, 1.0)]),
            op("linear", 10, &[(3.0, 3.0)]),
        ];
        let bad = vec![
            op("linear", 9, &[(1.0, 2.0)]),
            op("gelu", 9, &[(0.4, 0.9)]),
            op("linear", 10, &[(2.0, 2.5)]),
        ];
        let d = first_divergence(&good, &bad, 1e-6).expect("differs");
        assert_eq!(d.difference, Difference::Unpaired);
        assert_eq!(d.good.unwrap().op, "relu");
        assert_eq!(d.bad.unwrap().op, "gelu");
    }

    #[test]
    fn shapes_and_dtypes_differ_before_values_are_compared() {
        let good = vec![op("sum", 5, &[(1.0, 1.0)])];
        let mut bad = good.clone();
        bad[0].outputs[0].dtype = "torch.float64".into();
        assert_eq!(
            first_divergence(&good, &bad, 1e-6).unwrap().difference,
            Difference::Dtype
        );
        bad[0].outputs[0].shape = vec![4];
        assert_eq!(
            first_divergence(&good, &bad, 1e-6).unwrap().difference,
            Difference::Shape
        );
        // Both NaN: the same result.
        let nan = vec![op("log", 5, &[(f64::NAN, f64::NAN)])];
        assert_eq!(first_divergence(&nan, &nan.clone(), 1e-6), None);
    }

    #[test]
    fn an_op_only_the_bad_run_calls_is_named_when_every_value_agrees() {
        // `.detach()` inserted: no value changes, the call sequence does.
        let good = vec![
            op("linear", 10, &[(1.0, 2.0)]),
            op("relu", 11, &[(0.5, 1.0)]),
        ];
        let bad = vec![
            op("linear", 10, &[(1.0, 2.0)]),
            op("Tensor.detach", 11, &[(1.0, 2.0)]),
            op("relu", 11, &[(0.5, 1.0)]),
        ];
        let d = first_divergence(&good, &bad, 1e-6).expect("differs");
        assert_eq!(d.difference, Difference::Unpaired);
        assert_eq!((d.good_index, d.bad_index), (None, Some(1)));
        assert_eq!(d.op().op, "Tensor.detach");
        assert_eq!(d.equal_before, 2);
    }

    #[test]
    fn a_run_that_stops_early_diverges_where_it_stopped() {
        let good = vec![
            op("linear", 10, &[(1.0, 2.0)]),
            op("relu", 11, &[(0.5, 1.0)]),
        ];
        let bad = vec![op("linear", 10, &[(1.0, 2.0)])];
        let d = first_divergence(&good, &bad, 1e-6).expect("differs");
        assert_eq!(d.difference, Difference::Unpaired);
        assert_eq!((d.good_index, d.bad_index), (Some(1), None));
        assert_eq!(d.op().op, "relu");
    }
}
