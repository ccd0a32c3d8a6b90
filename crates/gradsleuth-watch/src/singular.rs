//! Where an op's derivative is infinite (or 0/0) although its output is finite: the usual
//! origins of a NaN gradient that the forward does not show. The watch's re-run asks, for each
//! op it replays, which inputs to look for ([`condition`]); Python counts them on the tensors
//! (the only part that needs torch) and the reason is worded here ([`reason`]).

/// What makes an op's derivative singular, to be counted on its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// First input exactly 0.
    Zero,
    /// First input exactly ±1.
    AbsOne,
    /// First and second inputs both exactly 0.
    BothZero,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Zero => "zero",
            Condition::AbsOne => "abs_one",
            Condition::BothZero => "both_zero",
        }
    }
}

/// Powers whose derivative is infinite at 0 for exponents in (0, 1).
fn is_power(op: &str) -> bool {
    matches!(op, "pow" | "__pow__" | "float_power")
}

/// The condition to count for `op` (its short name, `sqrt`, `__pow__`), given its exponent
/// for powers and how many tensor inputs it has; None for ops without such a point.
pub fn condition(op: &str, exponent: Option<f64>, tensor_inputs: usize) -> Option<Condition> {
    match op {
        "sqrt" | "rsqrt" => Some(Condition::Zero),
        _ if is_power(op) => exponent
            .filter(|e| *e > 0.0 && *e < 1.0)
            .map(|_| Condition::Zero),
        "acos" | "asin" => Some(Condition::AbsOne),
        "atan2" if tensor_inputs > 1 => Some(Condition::BothZero),
        _ => None,
    }
}

/// The reason, for `count` (> 0) inputs of `op` meeting its condition.
pub fn reason(op: &str, exponent: Option<f64>, count: u64) -> Option<String> {
    Some(match op {
        "sqrt" | "rsqrt" => {
            format!(
                "{count} input value(s) are exactly 0, where the derivative of {op} is infinite"
            )
        }
        _ if is_power(op) => format!(
            "{count} input value(s) are exactly 0, where the derivative of x**{} is infinite",
            python_float(exponent.filter(|e| *e > 0.0 && *e < 1.0)?)
        ),
        "acos" | "asin" => format!(
            "{count} input value(s) are exactly ±1, where the derivative of {op} is infinite"
        ),
        "atan2" => format!("{count} point(s) are (0, 0), where the derivative of atan2 is 0/0"),
        _ => return None,
    })
}

/// A float as Python's `str()` writes it (`0.5`, `0.25`, `1e-05`).
fn python_float(x: f64) -> String {
    if x != 0.0 && x.abs() < 1e-4 {
        let s = format!("{x:e}");
        // Rust: 1e-5; Python: 1e-05.
        match s.split_once('e') {
            Some((m, e)) => {
                let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
                format!("{m}e{sign}{digits:0>2}")
            }
            None => s,
        }
    } else if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singular_points_and_their_wording() {
        assert_eq!(condition("sqrt", None, 1), Some(Condition::Zero));
        assert_eq!(condition("__pow__", Some(0.5), 1), Some(Condition::Zero));
        assert_eq!(condition("__pow__", Some(2.0), 1), None);
        assert_eq!(condition("atan2", None, 1), None);
        assert_eq!(condition("relu", None, 1), None);
        assert_eq!(
            reason("sqrt", None, 3).unwrap(),
            "3 input value(s) are exactly 0, where the derivative of sqrt is infinite"
        );
        assert_eq!(
            reason("pow", Some(0.5), 1).unwrap(),
            "1 input value(s) are exactly 0, where the derivative of x**0.5 is infinite"
        );
        assert!(reason("acos", None, 2).unwrap().contains("exactly ±1"));
        assert!(reason("atan2", None, 2).unwrap().contains("0/0"));
        assert_eq!(python_float(0.25), "0.25");
        assert_eq!(python_float(1e-5), "1e-05");
    }
}
