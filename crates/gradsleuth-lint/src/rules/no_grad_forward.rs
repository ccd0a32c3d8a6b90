//! GS304: `@torch.no_grad()` / `@torch.inference_mode()` on a module's `forward`.

use ruff_python_ast::{Expr, StmtFunctionDef};

use super::Rule;
use crate::checker::{dotted, Checker};

pub const RULE: Rule = Rule { code: "GS304" };

pub fn check(ck: &mut Checker, f: &StmtFunctionDef) {
    // A module without parameters of its own (rotary embeddings, masks from buffers) loses
    // nothing by computing its output without recording.
    // A selector (a `forward` returning only indices or masks) cannot pass a gradient through
    // its output anyway: not recording is a saving there, not a cut.
    if f.name.id.as_str() != "forward"
        || !ck.in_module_class()
        || !ck.class_holds_parameters()
        || crate::selector::returns_only_integers(f)
    {
        return;
    }
    for d in &f.decorator_list {
        let target = match &d.expression {
            Expr::Call(c) => dotted(&c.func),
            other => dotted(other),
        };
        if target.is_some_and(|n| n.ends_with("no_grad") || n.ends_with("inference_mode")) {
            let loc = ck.location(d);
            ck.report(
                RULE.finding("`forward` runs with gradient recording disabled: the module never gets a gradient when it is trained.")
                    .at(Some(loc))
                    .fix("Remove the decorator; wrap evaluation calls in `with torch.no_grad():` instead."),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_decorated_forward() {
        let src = "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n    @torch.no_grad()\n    def forward(self, x):\n        return self.fc(x)\n";
        assert_eq!(codes(src), vec![("GS304".into(), 5)]);
    }

    #[test]
    fn a_module_without_parameters_is_fine() {
        let src = "class Rotary(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n        self.inv_freq = nn.Buffer(torch.arange(d))\n    @torch.no_grad()\n    def forward(self, x):\n        return x * self.inv_freq\n";
        assert!(codes(src).is_empty());
    }

    /// DETR's `PostProcess`: no `__init__`, `nn.Module` its only base, boxes and scores out.
    #[test]
    fn a_post_processor_without_init_or_parameters_is_fine() {
        let src = "import torch\nimport torch.nn as nn\n\nclass PostProcess(nn.Module):\n    @torch.no_grad()\n    def forward(self, outputs, sizes):\n        prob = outputs['logits'].softmax(-1)\n        scores, labels = prob.max(-1)\n        return [{'scores': s, 'labels': l} for s, l in zip(scores, labels)]\n";
        assert!(codes(src).is_empty());
        // A base of its own may build parameters: unknown, so still told.
        let src = src.replace("(nn.Module)", "(nn.Module, Heads)");
        assert_eq!(codes(&src), vec![("GS304".into(), 5)]);
    }

    /// transformers' DeepSeek-V3.2 sparse-attention indexer: its result is the top-k indices.
    #[test]
    fn a_selector_returning_indices_is_fine() {
        let src = "class Indexer(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n        self.wk = nn.Linear(d, d)\n        self.k_norm = nn.LayerNorm(d)\n    @torch.no_grad()\n    def forward(self, x, k):\n        scores = x @ self.k_norm(self.wk(x)).transpose(-1, -2)\n        return scores.topk(k, dim=-1).indices.to(torch.int32)\n";
        assert!(codes(src).is_empty());
        // The same module returning the scores loses their gradient.
        let src = src.replace(".topk(k, dim=-1).indices.to(torch.int32)", "");
        assert_eq!(codes(&src), vec![("GS304".into(), 6)]);
    }

    #[test]
    fn evaluation_helpers_are_fine() {
        let src = "class M(nn.Module):\n    def forward(self, x):\n        return x\n    @torch.no_grad()\n    def predict(self, x):\n        return self(x)\n";
        assert!(codes(src).is_empty());
    }
}
