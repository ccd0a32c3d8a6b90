//! GS318: a module's output re-wrapped with `torch.tensor(t)` / `torch.as_tensor(t)`, or made
//! a new leaf with `nn.Parameter(t)`.

use super::{report_cut, Rule};
use crate::checker::Checker;
use crate::flow::FlowCut;

pub const RULE: Rule = Rule { code: "GS318" };

pub fn report(ck: &mut Checker, cut: &FlowCut) {
    report_cut(
        ck,
        &RULE,
        cut,
        "a `torch.tensor(...)`/`torch.as_tensor(...)`/`nn.Parameter(...)` copy",
        "Use the tensor itself (`t.to(dtype)`, `torch.stack(list_of_tensors)`) instead of re-wrapping it.",
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn a_leaf_the_optimizer_trains_is_deliberate() {
        // Imagic: text embeddings from a frozen encoder, made a leaf and optimized; the
        // prompt they were computed from is no model.
        let src = "def train(self, prompt, image):\n    ids = self.tokenizer(prompt)\n    emb = torch.nn.Parameter(self.text_encoder(ids)[0], requires_grad=True)\n    emb = emb.detach()\n    emb.requires_grad_()\n    opt = torch.optim.Adam([emb], lr=1e-3)\n    for _ in range(10):\n        loss = F.mse_loss(self.unet(image, emb), image)\n        loss.backward()\n        opt.step()\n";
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        // The module the copy cuts off, optimized too: still told.
        let src = "enc = nn.Linear(4, 4)\nhead = nn.Linear(4, 1)\nw = nn.Parameter(enc(x0))\nopt = torch.optim.Adam([w] + list(enc.parameters()) + list(head.parameters()))\nfor x in data:\n    loss = head(x * w).sum()\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS318".into(), 3)]);
    }

    #[test]
    fn flags_rewrapped_features() {
        let src = "import torch\nimport torch.nn as nn\nstage1 = nn.Linear(10, 16)\nstage2 = nn.Linear(16, 2)\nopt = torch.optim.Adam(list(stage1.parameters()) + list(stage2.parameters()))\n\ndef forward(x):\n    feats = torch.tensor(stage1(x), dtype=torch.float32)\n    return stage2(feats)\n\nfor x, y in data:\n    loss = nn.functional.cross_entropy(forward(x), y)\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS318".into(), 8)]);
    }

    #[test]
    fn flags_a_computed_value_made_a_parameter_in_forward() {
        let src = "import torch\nimport torch.nn as nn\n\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = nn.Parameter(torch.randn(4, 4))\n        self.enc = nn.Linear(4, 4)\n        self.head = nn.Linear(4, 1)\n\n    def forward(self, x):\n        p = nn.Parameter(self.enc(self.w))\n        return self.head(x @ p)\n\nmodel = M()\nopt = torch.optim.Adam(model.parameters())\nfor x, y in data:\n    loss = (model(x) - y).pow(2).mean()\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS318".into(), 12)]);
    }

    /// PyTorch's own REINFORCE example: the policy keeps the episode's rewards (numbers from
    /// the environment) in a plain list attribute, and the returns are built from them.
    #[test]
    fn rewards_kept_in_a_list_attribute_of_the_policy_are_fine() {
        let src = "import torch\nimport torch.nn as nn\n\nclass Policy(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.affine = nn.Linear(4, 2)\n        self.saved_log_probs = []\n        self.rewards = []\n\n    def forward(self, x):\n        return self.affine(x).softmax(-1)\n\npolicy = Policy()\noptimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)\n\ndef finish_episode():\n    R = 0\n    returns = []\n    for r in policy.rewards[::-1]:\n        R = r + 0.99 * R\n        returns.insert(0, R)\n    returns = torch.tensor(returns)\n    loss = torch.cat([-lp * R for lp, R in zip(policy.saved_log_probs, returns)]).sum()\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n";
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        // A submodule's output rewrapped is still told.
        let bad = src.replace(
            "for r in policy.rewards[::-1]:",
            "for r in policy.affine(torch.ones(4))[::-1]:",
        );
        assert_eq!(codes(&bad), vec![("GS318".into(), 23)]);
    }

    #[test]
    fn wrapping_data_is_fine() {
        let src = "import torch\nimport torch.nn as nn\nmodel = nn.Linear(3, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor xs, ys in data:\n    x = torch.tensor(xs, dtype=torch.float32)\n    y = torch.as_tensor(ys, device=x.device)\n    loss = (model(x) - y).pow(2).mean()\n    loss.backward()\n";
        assert!(codes(src).is_empty());
    }
}
