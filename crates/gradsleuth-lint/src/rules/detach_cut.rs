//! GS316: a module's output reaches the loss (or `forward`'s result) only through `.detach()`.

use super::{report_cut, Rule};
use crate::checker::Checker;
use crate::flow::FlowCut;

pub const RULE: Rule = Rule { code: "GS316" };

pub fn report(ck: &mut Checker, cut: &FlowCut) {
    report_cut(
        ck,
        &RULE,
        cut,
        "`.detach()`",
        "Remove `.detach()` on this path (keep it only where a gradient must stop and the module is trained by another path).",
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    const MODEL: &str = "import torch\nimport torch.nn as nn\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.backbone = nn.Linear(4, 8)\n        self.head = nn.Linear(8, 1)\n\n";

    #[test]
    fn flags_a_detached_submodule_in_forward() {
        let src = format!("{MODEL}    def forward(self, x):\n        feats = self.backbone(x)\n        return self.head(feats.detach())\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 12)]);
    }

    #[test]
    fn flags_a_helper_that_detaches_the_model_output() {
        let src = "import torch\nimport torch.nn as nn\n\ndef kl(mu):\n    mu = mu.detach()\n    return (mu ** 2).mean()\n\nenc = nn.Linear(4, 2)\nopt = torch.optim.Adam(enc.parameters())\nfor x in data:\n    loss = kl(enc(x))\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS316".into(), 5)]);
    }

    #[test]
    fn stop_gradient_with_a_live_path_is_fine() {
        // SimSiam: the encoder is live through p1 while z2 is detached.
        let src = format!("{MODEL}    def forward(self, x1, x2):\n        z1, z2 = self.backbone(x1), self.backbone(x2)\n        p1 = self.head(z1)\n        return p1, z2.detach()\n");
        assert!(codes(&src).is_empty());
    }

    #[test]
    fn gan_and_target_networks_are_fine() {
        let src = "import torch\nimport torch.nn as nn\nG = nn.Linear(2, 4)\nD = nn.Linear(4, 1)\ntarget_net = nn.Linear(4, 1)\nopt_g = torch.optim.Adam(G.parameters())\nopt_d = torch.optim.Adam(D.parameters())\nfor z, real in data:\n    fake = G(z)\n    d_loss = D(fake.detach()).mean() - D(real).mean()\n    d_loss.backward()\n    g_loss = -D(fake).mean() + (D(real) - target_net(real).detach()).pow(2).mean()\n    g_loss.backward()\n";
        assert!(codes(src).is_empty());
    }
}
