//! GS317: a module's output reaches the loss only through `.item()`, `.tolist()` or `.numpy()`.

use super::{report_cut, Rule};
use crate::checker::Checker;
use crate::flow::FlowCut;

pub const RULE: Rule = Rule { code: "GS317" };

pub fn report(ck: &mut Checker, cut: &FlowCut) {
    report_cut(
        ck,
        &RULE,
        cut,
        "a Python/NumPy round trip",
        "Keep the values as tensors (use torch ops instead of `.item()`/`.tolist()`/`.numpy()`).",
    );
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_weights_built_from_item() {
        let src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\ndef weighted(logits, y, scores):\n    w = torch.tensor([s.item() for s in scores])\n    return (w * F.cross_entropy(logits, y, reduction='none')).mean()\n\nclf = nn.Linear(8, 3)\nscorer = nn.Linear(8, 1)\nopt = torch.optim.Adam(list(clf.parameters()) + list(scorer.parameters()))\nfor x, y in loader:\n    loss = weighted(clf(x), y, scorer(x))\n    loss.backward()\n";
        assert_eq!(codes(src), vec![("GS317".into(), 6)]);
    }

    #[test]
    fn logging_item_is_fine() {
        let src = "import torch\nimport torch.nn as nn\nmodel = nn.Linear(8, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nhistory = []\nfor x, y in loader:\n    loss = (model(x) - y).pow(2).mean()\n    loss.backward()\n    history.append(loss.item())\n    scale = float(loss)\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn a_dtype_and_device_source_passes_no_gradient() {
        // `.to(v)` / `.type_as(v)` take only the dtype and device of `v`.
        for tail in [".to(v)", ".type_as(v)"] {
            let src = format!("import torch\nimport torch.nn as nn\n\nclass Attn(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.v = nn.Linear(4, 4)\n        self.o = nn.Linear(4, 4)\n\n    def forward(self, x):\n        v = self.v(x)\n        v = torch.Tensor(v.tolist()){tail}\n        return self.o(v)\n");
            assert_eq!(codes(&src), vec![("GS317".into(), 12)], "{tail}");
        }
    }

    #[test]
    fn a_numpy_round_trip_is_one_even_after_detach() {
        let src = "import torch\nimport torch.nn as nn\n\nclass Attn(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.v = nn.Linear(4, 4)\n        self.o = nn.Linear(4, 4)\n\n    def forward(self, x):\n        v = self.v(x)\n        v = torch.from_numpy(v.detach().cpu().float().numpy())\n        return self.o(v)\n";
        assert_eq!(codes(src), vec![("GS317".into(), 12)]);
    }

    /// transformers' SigLIP2: a `@staticmethod` called through `self` takes its arguments from
    /// the first (the embedding to the first parameter, the shapes read by `.tolist()` to the
    /// second); as a method it would skip its `self`.
    #[test]
    fn a_static_method_called_through_self_gets_its_arguments_in_order() {
        let src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nclass Emb(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.pos = nn.Embedding(16, 4)\n\n    @staticmethod\n    def resize(pos, shapes):\n        h, w = shapes[0].tolist()\n        return F.interpolate(pos, size=(h, w))\n\n    def forward(self, x, shapes):\n        return x + self.resize(self.pos.weight, shapes)\n";
        assert!(codes(src).is_empty());
        let method = src.replace(
            "    @staticmethod\n    def resize(pos",
            "    def resize(self, pos",
        );
        assert!(codes(&method).is_empty());
    }
}
