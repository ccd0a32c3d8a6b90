//! GS313: `optimizer.step()` before `loss.backward()` in the same block.

use ruff_python_ast::Stmt;

use super::Rule;
use crate::checker::Checker;

pub const RULE: Rule = Rule { code: "GS313" };

/// (An optimizer's `.step()`, a `.backward()`) in the statement: a schedule's or a weight
/// average's step and an environment's (its result unpacked) are not the first.
fn method_calls(ck: &Checker, s: &Stmt) -> (bool, bool) {
    let names = super::zero_grad_order::calls(ck, s);
    let has = |n: &str| names.iter().any(|x| x == n);
    (has("step"), has("backward"))
}

pub fn check(ck: &mut Checker, body: &[Stmt]) {
    // Only simple statements: a step and a backward in the same compound statement are
    // ordered by their own body.
    let simple: Vec<&Stmt> = body
        .iter()
        .filter(|s| matches!(s, Stmt::Expr(_) | Stmt::Assign(_)))
        .collect();
    let first_step = simple
        .iter()
        .position(|s| method_calls(ck, s).0 && !method_calls(ck, s).1);
    let first_backward = simple.iter().position(|s| method_calls(ck, s).1);
    if let (Some(st), Some(bw)) = (first_step, first_backward) {
        if st < bw {
            let loc = ck.location(simple[st]);
            ck.report(
                RULE.finding("`step()` runs before `backward()` in this iteration: it applies stale (or no) gradients.")
                    .at(Some(loc))
                    .fix("Call `optimizer.step()` after `loss.backward()`."),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_step_before_backward() {
        let src = "for x in data:\n    opt.zero_grad()\n    opt.step()\n    loss = model(x).sum()\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS313".into(), 3)]);
    }

    /// A reinforcement-learning loop: the environment steps before the policy's loss.
    #[test]
    fn an_environment_step_is_no_optimizer_step() {
        let src = "env = gym.make('CartPole-v1')\nopt = torch.optim.Adam(policy.parameters())\nobs, _ = env.reset()\nfor episode in range(10):\n    logits = policy(torch.as_tensor(obs))\n    action = torch.distributions.Categorical(logits=logits).sample()\n    obs, reward, terminated, truncated, info = env.step(action.item())\n    loss = -logits.log_softmax(-1)[action] * reward\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n";
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        // A schedule or an average built in the file steps first: fine too.
        for first in [
            "lr_scheduler = get_scheduler('cosine', opt)\n",
            "avg = EMAModel(policy.parameters())\n",
        ] {
            let name = first.split(' ').next().unwrap_or_default();
            let src = format!("{first}for x in data:\n    {name}.step()\n    loss = policy(x).sum()\n    loss.backward()\n    opt.step()\n");
            assert!(codes(&src).is_empty(), "{src}: {:?}", codes(&src));
        }
    }

    #[test]
    fn scheduler_steps_and_the_usual_order_are_fine() {
        let src = "for x in data:\n    sched.step()\n    opt.zero_grad()\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n";
        assert!(codes(src).is_empty());
    }
}
