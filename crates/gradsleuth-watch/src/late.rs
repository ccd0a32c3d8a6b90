//! A NaN read a step late. On a GPU, watch copies a step's norms to the host without making it
//! wait, so a non-finite gradient is seen one step after it happened, when that step's inputs
//! are gone and its update applied. What happens then ([`Late`]) and how it is told
//! ([`note`], [`trace`]) is decided here; Python only looks at the tensors.

use gradsleuth_model::capture::NanTrace;

/// What became of a NaN read a step late.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Late {
    /// It recurs at the next step, which is re-run to its op.
    Recurs,
    /// The late step's update wrote NaN/Inf into these weights: a re-run would start from them.
    Weights(Vec<String>),
    /// It did not recur and the late step's inputs are gone.
    Gone,
    /// The run ended before another step.
    End,
}

impl Late {
    /// From the word the Python side passes (`recurs`, `weights`, `gone`, `end`).
    pub fn parse(how: &str, broken: Vec<String>) -> Result<Late, String> {
        Ok(match how {
            "recurs" => Late::Recurs,
            "weights" => Late::Weights(broken),
            "gone" => Late::Gone,
            "end" => Late::End,
            other => {
                return Err(format!(
                    "late NaN: unknown outcome {other:?} (recurs, weights, gone, end)"
                ))
            }
        })
    }
}

/// The note on a NaN first seen at `step` and read a step late.
pub fn note(step: u64, late: &Late) -> String {
    let head = format!(
        "the gradient turned non-finite at step {step}, read a step later (watch does not make the host wait for the device)"
    );
    let why = match late {
        Late::Recurs => return format!("{head}; re-run: step {}, where it recurs", step + 1),
        Late::Weights(broken) => {
            let mut shown: String = broken
                .iter()
                .take(3)
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ");
            if broken.len() > 3 {
                shown.push_str(" and others");
            }
            format!("step {step}'s update wrote NaN/Inf into {shown}, so a re-run would start from them")
        }
        Late::Gone => format!(
            "it did not recur at step {} and step {step}'s inputs were gone",
            step + 1
        ),
        Late::End => "the run ended".into(),
    };
    format!("{head}; {why}: not re-run (`GRADSLEUTH_WATCH_READS=now` reads every step at once, making the host wait)")
}

/// The trace of a late NaN that is not re-run: its step, the parameters, the note.
pub fn trace(step: u64, params: Vec<String>, late: &Late) -> NanTrace {
    NanTrace {
        step,
        params,
        method: "replay".into(),
        notes: vec![note(step, late)],
        ..NanTrace::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_says_why_it_was_or_was_not_re_run() {
        let n = note(7, &Late::Recurs);
        assert!(n.starts_with("the gradient turned non-finite at step 7, read a step later"));
        assert!(n.ends_with("re-run: step 8, where it recurs"), "{n}");
        assert!(note(7, &Late::Gone)
            .contains("it did not recur at step 8 and step 7's inputs were gone: not re-run"));
        assert!(note(7, &Late::End).contains("; the run ended: not re-run"));
        let two = note(
            3,
            &Late::Weights(vec!["fc.weight".into(), "fc.bias".into()]),
        );
        assert!(
            two.contains("step 3's update wrote NaN/Inf into `fc.weight`, `fc.bias`, so a re-run"),
            "{two}"
        );
        let many: Vec<String> = (0..5).map(|i| format!("l{i}.weight")).collect();
        let m = note(3, &Late::Weights(many));
        assert!(
            m.contains("into `l0.weight`, `l1.weight`, `l2.weight` and others, so"),
            "{m}"
        );
    }

    #[test]
    fn an_unknown_outcome_is_an_error() {
        assert!(Late::parse("later", Vec::new()).is_err());
        assert_eq!(Late::parse("end", Vec::new()), Ok(Late::End));
        let t = trace(2, vec!["w".into()], &Late::End);
        assert_eq!((t.step, t.method.as_str(), t.notes.len()), (2, "replay", 1));
    }
}
