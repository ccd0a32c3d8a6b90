//! GS305: a layer constructed inside `forward`.

use ruff_python_ast::Expr;

use super::Rule;
use crate::checker::{call_name, Checker};

pub const RULE: Rule = Rule { code: "GS305" };

pub fn check(ck: &mut Checker, e: &Expr) {
    if !ck.in_forward() || !ck.constructs_module(e) {
        return;
    }
    let name = call_name(e).unwrap_or_default();
    let last = name.rsplit('.').next().unwrap_or(&name).to_owned();
    if ck.builds_parameter_free(&name) {
        return;
    }
    let loc = ck.location(e);
    ck.report(
        RULE.finding(format!("`{name}` is constructed inside `forward`: its weights are re-initialised on every call and no optimizer holds them."))
            .at(Some(loc))
            .fix(format!("Create it once in `__init__` (`self.{} = {name}(...)`) and call it in forward.", last.to_lowercase())),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_layers_built_in_forward() {
        let src = "class M(nn.Module):\n    def forward(self, x):\n        proj = nn.Linear(x.shape[-1], 8)\n        return proj(x)\n";
        assert_eq!(codes(src), vec![("GS305".into(), 3)]);
    }

    #[test]
    fn flags_layers_built_in_a_method_forward_hands_on() {
        // DistilBERT's `apply_chunking_to_forward(self.ff_chunk, ...)`, a checkpointed inner
        // method: they run on every forward as a `self.method(...)` call would.
        let src = "class FFN(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n        self.lin1 = nn.Linear(d, d)\n\n    def forward(self, x):\n        return apply_chunking_to_forward(self.ff_chunk, 0, 1, x)\n\n    def ff_chunk(self, x):\n        return nn.Linear(self.lin1.in_features, self.lin1.out_features)(x)\n\n    def reset(self):\n        self.lin1 = nn.Linear(4, 4)\n";
        assert_eq!(codes(src), vec![("GS305".into(), 10)]);
    }

    #[test]
    fn init_and_parameter_free_modules_are_fine() {
        let src = "class DepthLoss(nn.Module):\n    def __init__(self, lambd=0.5):\n        super().__init__()\n        self.lambd = lambd\n    def forward(self, p, t):\n        return (p - t).pow(2).mean()\nclass M(nn.Module):\n    def __init__(self):\n        self.fc = nn.Linear(4, 4)\n    def forward(self, x, t):\n        return DepthLoss()(nn.ReLU()(self.fc(x)), t)\n";
        assert!(codes(src).is_empty());
    }

    /// transformers' CANINE pads with `nn.ConstantPad1d` in forward; SpeechT5 builds its loss
    /// module (two torch losses and a loss class of its own file) there.
    #[test]
    fn padding_layers_and_loss_modules_of_losses_are_fine() {
        let src = "class GuidedLoss(nn.Module):\n    def __init__(self, sigma):\n        super().__init__()\n        self.sigma = sigma\n    def forward(self, a):\n        return a.mean() * self.sigma\nclass SpecLoss(nn.Module):\n    def __init__(self, guided):\n        super().__init__()\n        self.l1 = L1Loss()\n        self.bce = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(5.0))\n        if guided:\n            self.attn = GuidedLoss(0.4)\n    def forward(self, p, t):\n        return self.l1(p, t) + self.bce(p, t)\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n    def forward(self, x, t):\n        x = nn.ConstantPad1d((0, 2), 0)(x)\n        x = nn.ReflectionPad2d(1)(x)\n        return SpecLoss(True)(self.fc(x), t)\n";
        assert!(codes(src).is_empty());
        // A loss class that learns (a task weight) is not parameter-free, whatever its name.
        let learned = src.replace(
            "self.sigma = sigma",
            "self.sigma = nn.Parameter(torch.ones(1))",
        );
        assert_eq!(codes(&learned), vec![("GS305".into(), 23)]);
    }
}
