//! GS113 `untouched`: no optimizer exists, backward passes gave parameters gradients, and the
//! script's own update never changed them (`p = p - lr * p.grad` rebinds a name; a manual
//! update over a subset of the model). An error when the script's update changed other
//! parameters; otherwise an info line, since a script may compute gradients only (saliency,
//! Fisher information) and need no update. The source shows the cause: `gradsleuth lint`'s
//! GS329 at the assignment becomes this finding's location (`gradsleuth_lint::xref`).

use gradsleuth_model::{Finding, Severity};

use super::{plural, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS113", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let cap = ctx.capture;
    let backwards = cap.backwards.len();
    if backwards < 2 || !cap.optimizers.is_empty() {
        return Vec::new();
    }
    let keys: Vec<u64> = ctx
        .facts
        .tensors
        .values()
        .filter(|f| f.visible && f.unchanged_by_hand && f.grad_nonzero() && !ctx.is_claimed(f.key))
        .map(|f| f.key)
        .collect();
    if keys.is_empty() {
        return Vec::new();
    }
    ctx.claim(keys.iter().copied());
    let moved = ctx
        .facts
        .tensors
        .values()
        .filter(|f| f.visible && f.changed)
        .count();
    let passes = if backwards == 1 { "pass" } else { "passes" };
    let n = plural(keys.len(), "parameter");
    let (severity, message) = if moved > 0 {
        (
            Severity::Error,
            format!("No optimizer exists and the script updates weights itself: {moved} changed, but these {n} got gradients in {backwards} observed backward {passes} and never changed. The update does not reach them."),
        )
    } else {
        (
            Severity::Info,
            format!("No optimizer exists, and none of the {n} that got gradients in {backwards} observed backward {passes} changed: nothing updated the weights. A script that only computes gradients needs no update; in a training loop, the update never reached the parameters."),
        )
    };
    let backward = cap
        .backwards
        .first()
        .and_then(|b| ctx.locate(b.location.as_ref()));
    vec![CHECK
        .finding(severity, message)
        .params(super::names(ctx, &keys))
        .at(backward)
        .chain([
            "backward(): gradients computed".into(),
            "update: weights unchanged ✗".into(),
        ])
        .fix("Update the parameters in place under `torch.no_grad()` (`p -= lr * p.grad` or `p.sub_(lr * p.grad)`; assigning `p = p - lr * p.grad` only rebinds the name, and `p.sub(...)` returns a new tensor), over every parameter that should train, or use an optimizer: `torch.optim.SGD(model.parameters(), lr=lr)`.")]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    /// `healthy`'s model without its optimizer: three backward passes; `changed` says which
    /// weights the script's own update changed.
    fn by_hand(changed: &[(u64, bool)]) -> Scenario {
        let mut s = healthy(0);
        s.capture.optimizers.clear();
        for _ in 0..3 {
            s.backward(&[10, 11], &[(10, Some(0.5)), (11, Some(0.2))]);
        }
        s.capture.weight_changes = changed.to_vec();
        s
    }

    #[test]
    fn an_update_that_misses_some_parameters_is_an_error() {
        let s = by_hand(&[(10, true), (11, false)]);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Error);
        assert_eq!(f[0].params, vec!["fc.bias"]);
        assert!(f[0].message.contains("1 changed"), "{}", f[0].message);
        let r = s.report();
        let bias = r.parameters.iter().find(|p| p.name == "fc.bias").unwrap();
        assert_eq!(bias.status, gradsleuth_model::ParamStatus::NotUpdated);
    }

    #[test]
    fn nothing_changed_without_an_optimizer_is_an_info_line() {
        let s = by_hand(&[(10, false), (11, false)]);
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].params, vec!["fc.weight", "fc.bias"]);
    }

    #[test]
    fn a_manual_update_that_changes_everything_is_quiet() {
        let s = by_hand(&[(10, true), (11, true)]);
        assert!(s.run(&CHECK).is_empty());
        assert!(s.quiet());
    }

    #[test]
    fn runs_with_an_optimizer_are_not_this_checks() {
        assert!(healthy(3).run(&CHECK).is_empty());
    }
}
