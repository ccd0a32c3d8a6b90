//! GS314: argmax/round/comparisons/integer casts in a loss expression.

use ruff_python_ast::{Expr, Stmt};

use super::Rule;
use crate::checker::{dotted, Checker};

pub const RULE: Rule = Rule { code: "GS314" };

const OPS: &[&str] = &[
    "argmax", "argmin", "round", "floor", "ceil", "sign", "long", "int", "bool",
];

/// The first non-differentiable op on the *value path* of a loss expression: arithmetic and
/// method chains are followed; arguments of function calls (labels passed to a loss, the
/// condition of `torch.where`) and comparisons in conditions are not.
fn non_diff(e: &Expr) -> Option<&Expr> {
    match e {
        Expr::Call(c) => match c.func.as_ref() {
            Expr::Attribute(a) => {
                if OPS.contains(&a.attr.id.as_str())
                    && !dotted(&a.value).is_some_and(|v| v == "math" || v == "np" || v == "numpy")
                {
                    // `torch.round(x)` / `x.round()`
                    return Some(e);
                }
                non_diff(&a.value)
            }
            _ => None,
        },
        Expr::BinOp(b) => non_diff(&b.left).or_else(|| non_diff(&b.right)),
        Expr::UnaryOp(u) => non_diff(&u.operand),
        _ => None,
    }
}

pub fn check(ck: &mut Checker, s: &Stmt) {
    let Stmt::Assign(a) = s else { return };
    let is_loss = a.targets.iter().any(|t| matches!(t, Expr::Name(n) if n.id.as_str() == "loss" || n.id.as_str().ends_with("_loss")));
    if !is_loss {
        return;
    }
    let Some(op) = non_diff(&a.value) else { return };
    let loc = ck.location(op);
    ck.report(
        RULE.finding("A non-differentiable op (argmax, rounding, a comparison or an integer cast) is part of the loss: the model gets no gradient through it.")
            .at(Some(loc))
            .fix("Use a differentiable surrogate: log-softmax/cross-entropy instead of argmax, `x + (x.round() - x).detach()` for rounding."),
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_argmax_in_a_loss() {
        let src = "loss = (logits.argmax(-1).float() - y).abs().mean()\n";
        assert_eq!(codes(src), vec![("GS314".into(), 1)]);
    }

    /// A model whose output reaches the loss through `expr` (of `probs`) only.
    fn through(expr: &str) -> Vec<(String, u32)> {
        let src = format!("import torch\nimport torch.nn as nn\nmodel = nn.Linear(4, 3)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in data:\n    probs = model(x).softmax(-1)\n    pred = {expr}\n    loss = (pred.float() - y).pow(2).mean()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n");
        codes(&src)
    }

    #[test]
    fn the_indices_of_max_topk_and_sort_have_no_history() {
        for expr in [
            "probs.max(-1).indices",
            "probs.max(dim=1)[1]",
            "torch.max(probs, 1)[1]",
            "probs.topk(2, -1).indices[:, 0]",
            "torch.sort(probs, -1)[1][:, 0]",
        ] {
            assert_eq!(through(expr), vec![("GS314".into(), 7)], "{expr}");
        }
        let src = "import torch\nimport torch.nn as nn\nrouter = nn.Linear(4, 3)\nopt = torch.optim.SGD(router.parameters(), lr=0.1)\nfor x, y in data:\n    w, idx = router(x).softmax(-1).topk(2, -1)\n    loss = (idx.float() - y).pow(2).mean()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS314".into(), 6)]);
    }

    #[test]
    fn values_and_elementwise_maxima_keep_their_history() {
        for expr in [
            "probs.max(-1).values",
            "probs.max(-1)[0]",
            "torch.max(probs, probs.flip(0))[1]",
            "probs.max()",
            "probs.topk(2, -1)[0][:, 0]",
        ] {
            assert!(through(expr).is_empty(), "{expr}");
        }
        // the values in the loss, the indices for a metric
        let src = "import torch\nimport torch.nn as nn\nmodel = nn.Linear(4, 3)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in data:\n    best, pred = model(x).max(1)\n    acc = (pred == y).float().mean()\n    loss = -best.mean()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn metrics_labels_and_conditions_are_fine() {
        let src = "acc = (logits.argmax(-1) == y).float().mean()\nloss = F.cross_entropy(logits, y) + math.floor(2.5)\nloss = F.cross_entropy(s, t.argmax(-1))\nloss = torch.where(z < d, 0.5 * z * z, d * z)\n";
        assert!(codes(src).is_empty());
    }

    /// A router's correction bias is a parameter built frozen (updated by hand from the load):
    /// its reaching the output only through `topk`'s indices is its design. Shapes from
    /// transformers' MoE routers (AFMoE, Laguna, Ernie 4.5's statics module).
    #[test]
    fn parameters_built_frozen_are_not_cut() {
        let head = "import torch\nimport torch.nn as nn\n\n";
        let router = |init: &str, use_: &str| {
            format!("{head}class Router(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.gate = nn.Linear(4, n)\n{init}\n\n    def forward(self, h):\n        scores = self.gate(h).sigmoid()\n        _, idx = torch.topk(scores + {use_}, 2, dim=-1)\n        return scores.gather(-1, idx)\n")
        };
        for (init, use_) in [
            ("        self.bias = nn.Parameter(torch.zeros(n), requires_grad=False)", "self.bias"),
            ("        self.bias = nn.Parameter(torch.zeros(n), False)", "self.bias"),
            ("        self.bias = nn.Parameter(torch.zeros(n))\n        self.bias.requires_grad = False", "self.bias"),
            ("        self.register_parameter('bias', nn.Parameter(torch.zeros(n), requires_grad=False))", "self.bias"),
            ("        self.stats = Statics(n)", "self.stats(scores)"),
        ] {
            let statics = "class Statics(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.bias = nn.Parameter(torch.zeros(n), requires_grad=False)\n\n    def forward(self, h):\n        return h + self.bias\n\n";
            let src = router(init, use_).replacen(head, &format!("{head}{statics}"), 1);
            assert!(codes(&src).is_empty(), "{init}");
        }
        // A trainable bias used the same way is cut.
        let src = router(
            "        self.bias = nn.Parameter(torch.zeros(n))",
            "self.bias",
        );
        assert_eq!(codes(&src).len(), 1, "{src}");
    }

    #[test]
    fn a_scorer_the_holding_model_runs_on_its_own_path_is_not_cut() {
        // RF-DETR's shape: the encoder ranks proposals with a scorer only to pick them by
        // `topk`; the detection model runs the same scorer (`self.model.scorer`) on the
        // picked queries for its loss.
        let enc = "import torch\nfrom torch import nn\n\nclass Enc(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.scorer = nn.Linear(4, 3)\n        self.proj = nn.Linear(4, 4)\n\n    def forward(self, x):\n        q = self.proj(x)\n        idx = torch.topk(self.scorer(q).max(-1)[0], 2, dim=1)[1]\n        return torch.gather(q, 1, idx.unsqueeze(-1).expand(-1, -1, 4))\n";
        assert_eq!(codes(enc).len(), 1, "alone, the scorer is cut");
        let det = format!("{enc}\nclass Det(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.model = Enc()\n\n    def forward(self, x):\n        return self.model.scorer(self.model(x))\n");
        assert!(codes(&det).is_empty(), "{det}");
        // The same name read on a module of another class says nothing about this one.
        let other = det
            .replace(
                "self.model.scorer(self.model(x))",
                "self.aux.scorer(self.model(x))",
            )
            .replace(
                "        self.model = Enc()\n",
                "        self.model = Enc()\n        self.aux = Aux()\n",
            );
        assert_eq!(codes(&other).len(), 1, "{other}");
    }

    #[test]
    fn a_matcher_object_from_another_file_computes_labels_not_a_cut() {
        // A detector's anchor matcher (`det_utils.Matcher(...)`, a callable object with no
        // parameters): the labels compared from its indices and collected per image are
        // targets. A layer of this file's in the same place is still reported.
        let src = "import torch\nimport torch.nn as nn\nfrom . import _utils as det_utils\n\nclass RPN(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.head = nn.Linear(4, 1)\n        self.matcher = det_utils.Matcher(0.7, 0.3)\n\n    def forward(self, x, quality):\n        labels = []\n        for q in quality:\n            idx = self.matcher(q)\n            labels.append((idx >= 0).float())\n        return self.head(x), labels\n";
        assert!(codes(src).is_empty(), "{src}");
        let layer = src.replace("det_utils.Matcher(0.7, 0.3)", "nn.Linear(4, 4)");
        assert_eq!(codes(&layer).len(), 1, "{layer}");
    }
}
