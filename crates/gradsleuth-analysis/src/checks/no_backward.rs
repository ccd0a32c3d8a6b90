//! GS100 `no_backward`: the run never called `backward()` or `torch.autograd.grad`.

use std::collections::HashSet;

use gradsleuth_model::{Finding, Severity};

use super::Check;
use crate::Context;

pub const CHECK: Check = Check { code: "GS100", run };

fn run(ctx: &Context) -> Vec<Finding> {
    let cap = ctx.capture;
    // `gradsleuth.watch(...).report()` records no forward or backward, only the optimizer
    // steps it watched: gradients were computed.
    if !cap.backwards.is_empty() || cap.watch.as_ref().is_some_and(|w| w.steps > 0) {
        return Vec::new();
    }
    // Every parameter is explained by this (nothing could reach it), except those behind a
    // cut that made the forward fail (an op refusing a tensor made under `inference_mode`):
    // that cut is the cause, told by its own check.
    let cut: HashSet<u64> = cap
        .cuts
        .iter()
        .flat_map(|c| c.params.iter().copied())
        .collect();
    ctx.claim(
        ctx.facts
            .iter()
            .map(|(t, _)| t.key)
            .filter(|k| cap.error.is_none() || !cut.contains(k)),
    );
    let what = if cap.root_calls == 0 {
        "no model forward and no backward() call were observed"
    } else {
        "models ran forward, but backward() was never called"
    };
    let mut f = CHECK.finding(Severity::Warning,
        format!("Nothing to diagnose: {what}, so no gradient was computed."),
    )
    .fix("Run the script so that it reaches the training loop (check its arguments, and that the data loader yields batches), or use `gradsleuth.diagnose(model, batch, loss_fn)` on one batch.");
    if let Some(first) = cap.children.first() {
        // Training in processes the script started (Hogwild, `mp.spawn` by hand): this
        // process only waited for them.
        let n: u32 = cap.children.iter().map(|c| c.count).sum();
        let mut targets: Vec<String> = Vec::new();
        for c in &cap.children {
            let t = format!("`{}`", c.target);
            if !targets.contains(&t) {
                targets.push(t);
            }
        }
        let processes = if n == 1 {
            "1 process".to_owned()
        } else {
            format!("{n} processes")
        };
        f.message = format!(
            "Nothing observed: backward() was never called in this process; the script started {processes} running {} ({} start method), and gradsleuth does not enter processes a script starts itself.",
            targets.join(", "),
            first.method
        );
        f.fix = Some(format!(
            "To diagnose the training itself, call {} once in the main process under `gradsleuth run` (one worker), or wrap its loop in `with gradsleuth.trace():` inside the worker and print the report there.",
            targets[0]
        ));
        f.location = first.location.clone();
    }
    if cap.error.is_some() {
        // The traceback (and any finding explaining it) says more; this is context.
        f.message = format!("The script failed before any backward() call: {what}.");
        f.severity = Severity::Info;
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn training_in_child_processes_is_said_plainly_at_their_start() {
        let mut s = healthy(0);
        s.capture.root_calls = 0;
        for _ in 0..2 {
            s.capture
                .children
                .push(gradsleuth_model::capture::ChildRec {
                    target: "train".into(),
                    method: "fork".into(),
                    count: 2,
                    location: Some(gradsleuth_model::Location::new("hogwild.py", 30)),
                });
        }
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message
                .contains("started 4 processes running `train` (fork start method)"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].location.as_ref().map(|l| l.line), Some(30));
    }

    #[test]
    fn flags_a_run_without_backward() {
        let mut s = healthy(0);
        s.capture.root_calls = 2;
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("never called"));
        assert_eq!(s.report().findings.len(), 1, "the catch-all stays quiet");
    }

    #[test]
    fn silent_when_backward_ran() {
        assert!(healthy(2).run(&CHECK).is_empty());
    }

    #[test]
    fn silent_when_watch_saw_optimizer_steps() {
        let mut s = healthy(0);
        s.capture.watch = Some(gradsleuth_model::capture::WatchRec {
            steps: 30,
            ..Default::default()
        });
        assert!(s.run(&CHECK).is_empty());
        s.capture.watch.as_mut().unwrap().steps = 0;
        assert_eq!(
            s.run(&CHECK).len(),
            1,
            "a watch that saw no step explains nothing"
        );
    }
}
