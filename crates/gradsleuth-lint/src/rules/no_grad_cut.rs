//! GS319: a module's output reaches the loss only through a `no_grad` block or a
//! `@torch.no_grad()` function.

use super::{report_cut, Rule};
use crate::checker::Checker;
use crate::flow::FlowCut;

pub const RULE: Rule = Rule { code: "GS319" };

pub fn report(ck: &mut Checker, cut: &FlowCut) {
    if cut.source == crate::flow::INFERENCE_PARAMS {
        let loc = ck.location(&cut.cut.range());
        ck.report(
            RULE.finding("A model built under `torch.inference_mode()` is trained: its parameters are inference tensors, so backward fails (\"Inference tensors cannot be saved for backward\") and no weight gets a gradient.")
                .at(Some(loc))
                .fix("Build the model outside `torch.inference_mode()` (use it only around evaluation)."),
        );
        return;
    }
    if cut.source == crate::flow::INFERENCE {
        let loc = ck.location(&cut.cut.range());
        ck.report(
            RULE.finding("A tensor made under `torch.inference_mode()` reaches the loss: backward fails (\"Inference tensors cannot be saved for backward\") wherever an op saves it, and nothing before it gets a gradient.")
                .at(Some(loc))
                .fix("Compute it under `torch.no_grad()` instead (or outside the block), or `.clone()` it after the block."),
        );
        return;
    }
    report_cut(
        ck,
        &RULE,
        cut,
        "a block that disables gradient recording",
        "Call the module outside `torch.no_grad()` (or freeze it explicitly with `requires_grad_(False)` if it is not meant to learn).",
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_a_no_grad_block_in_forward() {
        let src = "import torch\nimport torch.nn as nn\n\nclass Scorer(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.text = nn.Linear(6, 4)\n        self.image = nn.Linear(8, 4)\n\n    def forward(self, image, tokens):\n        with torch.no_grad():\n            t = self.text(tokens)\n        return (self.image(image) * t).sum(-1)\n";
        assert_eq!(codes(src), vec![("GS319".into(), 11)]);
    }

    #[test]
    fn flags_a_model_built_under_inference_mode_and_trained() {
        let src = "import torch\nimport torch.nn as nn\n\nwith torch.inference_mode():\n    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in data:\n    loss = model(x).pow(2).mean()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS319".into(), 4)]);
        // Built for inference only (no optimizer, no backward): fine.
        let serve = "import torch\nimport torch.nn as nn\n\nwith torch.inference_mode():\n    model = nn.Linear(4, 1)\n    print(model(torch.randn(2, 4)))\n";
        assert!(codes(serve).is_empty());
        // Under `no_grad`, parameters are ordinary leaves: fine.
        let no_grad = src.replace("inference_mode", "no_grad");
        assert!(codes(&no_grad).is_empty());
        // The loop in a function the model is handed to, under any name: its backward runs on
        // what each call passes.
        let handed = "import torch\nimport torch.nn as nn\n\nwith torch.inference_mode():\n    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n\ndef fit(net, optimizer):\n    for x in data:\n        loss = net(x).pow(2).mean()\n        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n\nfit(model, opt)\n";
        assert_eq!(codes(handed), vec![("GS319".into(), 4)], "{handed}");
    }

    #[test]
    fn flags_a_decorated_helper() {
        let src = "import torch\nimport torch.nn as nn\n\n@torch.no_grad()\ndef features(enc, t):\n    return enc(t)\n\nclass Forecaster(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.pos = nn.Linear(1, 4)\n        self.out = nn.Linear(5, 1)\n\n    def forward(self, x, t):\n        return self.out(torch.cat([x, features(self.pos, t)], -1))\n";
        assert_eq!(codes(src), vec![("GS319".into(), 4)]);
    }

    /// CleanRL's PPO: the value of the next observation, for the returns, is computed under
    /// `no_grad` with one method of the agent, and the loss trains the same critic through
    /// another method.
    #[test]
    fn a_bootstrap_value_from_a_method_of_the_trained_agent_is_fine() {
        let src = "import torch\nimport torch.nn as nn\n\nclass Agent(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.critic = nn.Linear(4, 1)\n        self.actor = nn.Linear(4, 2)\n\n    def get_value(self, x):\n        return self.critic(x)\n\n    def get_action_and_value(self, x):\n        return self.actor(x), self.critic(x)\n\nif __name__ == '__main__':\n    agent = Agent().to('cpu')\n    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4)\n    for update in range(10):\n        with torch.no_grad():\n            next_value = agent.get_value(next_obs)\n            returns = rewards + 0.99 * next_value\n        logits, newvalue = agent.get_action_and_value(obs)\n        loss = ((newvalue - returns) ** 2).mean() - logits.mean()\n        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n";
        assert!(codes(src).is_empty(), "{:?}", codes(src));
        // A part reached only through the method run under no_grad is still told: here the
        // critic, when the other method uses the actor alone.
        let bad = src.replace(
            "return self.actor(x), self.critic(x)",
            "return self.actor(x), self.actor(x)[:, :1]",
        );
        assert_eq!(codes(&bad), vec![("GS319".into(), 20)]);
    }

    #[test]
    fn a_frozen_teacher_is_fine() {
        let src = "import torch\nimport torch.nn as nn\nteacher = nn.Linear(4, 2)\nstudent = nn.Linear(4, 2)\nopt = torch.optim.Adam(student.parameters())\nfor x in data:\n    with torch.no_grad():\n        t = teacher(x)\n        pseudo = student(x).argmax(-1)\n    loss = (student(x) - t).pow(2).mean() + nn.functional.cross_entropy(student(x), pseudo)\n    loss.backward()\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn flags_inference_tensors_that_reach_the_loss() {
        // Targets from a teacher under inference_mode: the MSE saves them, backward fails.
        let src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nteacher = nn.Linear(4, 2)\nstudent = nn.Linear(4, 2)\nopt = torch.optim.Adam(student.parameters())\nfor x in data:\n    with torch.inference_mode():\n        t = teacher(x)\n        ids = torch.cat([x[:, :1] * 0, x[:, 1:]], 1)\n    loss = F.mse_loss(student(ids), t)\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS319".into(), 8)]);
    }

    #[test]
    fn inference_tensors_cloned_or_kept_out_of_the_loss_are_fine() {
        let src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nteacher = nn.Linear(4, 2)\nstudent = nn.Linear(4, 2)\nopt = torch.optim.Adam(student.parameters())\nfor x in data:\n    with torch.inference_mode():\n        t = teacher(x)\n        acc = (t.argmax(-1) == 0).float().mean()\n    loss = F.mse_loss(student(x), t.clone())\n    loss.backward()\n    log(acc)\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn flags_a_loss_helper_under_no_grad_whatever_built_the_model() {
        // The model comes from a loader this file cannot see into; asking for its parameters
        // says it is one.
        let src = "import torch\nimport torch.nn.functional as F\n\nmodel = load_model_code('m.py').Net(cfg)\n\ndef compute_loss(model, batch):\n    logits = model(batch['x'])\n    with torch.no_grad():\n        flat = logits.reshape(-1, 3)\n    return F.cross_entropy(flat, batch['y'])\n\nopt = torch.optim.AdamW(model.parameters())\nfor batch in data:\n    loss = compute_loss(model, batch)\n    loss.backward()\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS319".into(), 8)]);
    }

    /// transformers' Reformer: a reversible layer runs its blocks under `no_grad` in `forward`
    /// and recomputes them under `enable_grad` in a backward pass of its own.
    #[test]
    fn a_block_trained_by_a_backward_of_its_own_is_not_cut() {
        let src = "import torch\nimport torch.nn as nn\n\nclass RevLayer(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.attention = nn.Linear(4, 4)\n\n    def forward(self, x1, x2):\n        with torch.no_grad():\n            y1 = x1 + self.attention(x2)\n        return y1\n\n    def backward_pass(self, x2, grad):\n        with torch.enable_grad():\n            out = self.attention(x2)\n            out.backward(grad, retain_graph=True)\n";
        assert!(codes(src).is_empty());
        let plain = src.replace(
            "            out.backward(grad, retain_graph=True)\n",
            "            return out\n",
        );
        assert_eq!(codes(&plain), vec![("GS319".into(), 10)]);
    }

    #[test]
    fn flags_a_no_grad_around_a_backbone_handed_to_the_constructor() {
        // A detector given its backbone (torchvision's `GeneralizedRCNN(backbone: nn.Module,
        // ...)`, or a head built when none is given): the attribute is a submodule.
        let annotated = "import torch\nimport torch.nn as nn\n\nclass Detector(nn.Module):\n    def __init__(self, backbone: nn.Module, head=None):\n        super().__init__()\n        if head is None:\n            head = nn.Linear(8, 4)\n        self.backbone = backbone\n        self.head = head\n\n    def forward(self, x):\n        with torch.no_grad():\n            feats = self.backbone(x)\n        return self.head(feats)\n";
        assert_eq!(codes(annotated), vec![("GS319".into(), 13)]);
        let head = annotated
            .replace("        with torch.no_grad():\n            feats = self.backbone(x)\n        return self.head(feats)", "        feats = self.backbone(x)\n        with torch.no_grad():\n            out = self.head(feats)\n        return out + feats.mean()");
        assert_eq!(codes(&head), vec![("GS319".into(), 14)]);
        // A function handed in (an activation) has no parameters: quiet.
        let function = "import torch\nimport torch.nn as nn\n\nclass Block(nn.Module):\n    def __init__(self, act):\n        super().__init__()\n        self.proj = nn.Linear(8, 8)\n        self.act = act\n\n    def forward(self, x):\n        with torch.no_grad():\n            gate = self.act(x)\n        return self.proj(x) * gate\n";
        assert!(codes(function).is_empty());
    }
}
