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
    fn flags_a_detach_after_layers_held_in_a_container_imported_from_torch_nn() {
        // PyTorch Geometric's `BasicGNN`: `from torch.nn import ModuleList`, filled in a loop,
        // iterated in `forward` with its norms.
        let src = "import torch\nfrom torch.nn import Linear, ModuleList as Layers\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.convs = Layers()\n        self.norms = Layers()\n        for _ in range(2):\n            self.convs.append(Linear(4, 4))\n            self.norms.append(torch.nn.LayerNorm(4))\n        self.head = Linear(4, 1)\n\n    def forward(self, x):\n        for conv, norm in zip(self.convs, self.norms):\n            x = norm(conv(x))\n            x = x.detach()\n        return self.head(x)\n";
        assert_eq!(codes(src), vec![("GS316".into(), 17)]);
        // The last layer's output kept live: quiet.
        assert!(codes(&src.replace("            x = x.detach()\n", "")).is_empty());
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

    const LIT: &str = "import lightning as L\nimport torch\nfrom torch import nn\n\nclass Lit(L.LightningModule):\n    def __init__(self):\n        super().__init__()\n        self.encoder = nn.Linear(8, 4)\n        self.decoder = nn.Linear(4, 8)\n\n";

    #[test]
    fn flags_a_detach_in_a_lightning_training_step() {
        // training_step's return is the loss Lightning calls backward on; the optimizer
        // over `self.parameters()` holds the encoder.
        let src = format!("{LIT}    def training_step(self, batch, i):\n        z = self.encoder(batch).detach()\n        return ((self.decoder(z) - batch) ** 2).mean()\n\n    def configure_optimizers(self):\n        return torch.optim.Adam(self.parameters())\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 12)]);
        // Manual optimization: `self.manual_backward(loss)` is the backward.
        let src = format!("{LIT}    def training_step(self, batch, i):\n        opt = self.optimizers()\n        z = self.encoder(batch).detach()\n        loss = ((self.decoder(z) - batch) ** 2).mean()\n        self.manual_backward(loss)\n        opt.step()\n\n    def configure_optimizers(self):\n        return torch.optim.Adam(self.parameters())\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 13)]);
        // Correct: quiet.
        let src = format!("{LIT}    def training_step(self, batch, i):\n        return ((self.decoder(self.encoder(batch)) - batch) ** 2).mean()\n\n    def configure_optimizers(self):\n        return torch.optim.Adam(self.parameters())\n");
        assert!(codes(&src).is_empty());
    }

    #[test]
    fn flags_a_detach_of_a_model_handed_to_a_lightning_module() {
        // `LitModel(model)` keeps the model it is given (no call builds it in `__init__`):
        // `self.model.parameters()` in configure_optimizers says it is one; the cut is in a
        // helper the training step passes it to.
        let lit = "import lightning as L\nimport torch\nimport torch.nn.functional as F\n\ndef compute_loss(model, batch):\n    images, labels = batch\n    logits = model(images)\n    logits = logits.detach()\n    return F.cross_entropy(logits, labels)\n\nclass Lit(L.LightningModule):\n    def __init__(self, model):\n        super().__init__()\n        self.model = model\n\n    def training_step(self, batch, i):\n        return compute_loss(self.model, batch)\n\n    def configure_optimizers(self):\n        return torch.optim.AdamW(self.model.parameters())\n";
        assert_eq!(codes(lit), vec![("GS316".into(), 8)]);
        // Correct: quiet.
        assert!(codes(&lit.replace("    logits = logits.detach()\n", "")).is_empty());
        // A teacher handed in and frozen through its parameters, its output detached: the
        // student trains.
        let kd = "import lightning as L\nimport torch\nimport torch.nn.functional as F\n\nclass Distill(L.LightningModule):\n    def __init__(self, student, teacher):\n        super().__init__()\n        self.student = student\n        self.teacher = teacher\n        for p in self.teacher.parameters():\n            p.requires_grad = False\n\n    def training_step(self, batch, i):\n        t = self.teacher(batch).detach()\n        return F.mse_loss(self.student(batch), t)\n\n    def configure_optimizers(self):\n        return torch.optim.AdamW(self.student.parameters())\n";
        assert!(codes(kd).is_empty());
    }

    #[test]
    fn flags_a_detach_in_a_class_handed_to_a_constructor() {
        // Swin's `SwinStage(..., downsample=SwinPatchMerging if i < last else None)` builds
        // `self.downsample = downsample(dim=dim)`: calling it runs the class passed, whose
        // cut of its input cuts the stage's block before it.
        let src = "import torch\nimport torch.nn as nn\n\nclass Merge(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n        self.reduction = nn.Linear(4 * dim, 2 * dim)\n\n    def forward(self, x):\n        x = torch.cat([x, x, x, x], dim=-1)\n        x = x.detach()\n        return self.reduction(x)\n\nclass Stage(nn.Module):\n    def __init__(self, dim, downsample):\n        super().__init__()\n        self.block = nn.Linear(dim, dim)\n        self.downsample = downsample(dim=dim) if downsample is not None else None\n\n    def forward(self, x):\n        x = self.block(x)\n        if self.downsample is not None:\n            x = self.downsample(x)\n        return x\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.stages = nn.ModuleList([Stage(4, downsample=Merge if i == 0 else None) for i in range(2)])\n\n    def forward(self, x):\n        for s in self.stages:\n            x = s(x)\n        return x\n";
        assert_eq!(codes(src), vec![("GS316".into(), 11)]);
        assert!(codes(&src.replace("        x = x.detach()\n", "")).is_empty());
        // Built by a plain call of what is passed, positionally.
        let plain = src
            .replace(
                "downsample(dim=dim) if downsample is not None else None",
                "downsample(dim)",
            )
            .replace(
                "Stage(4, downsample=Merge if i == 0 else None)",
                "Stage(4, Merge)",
            );
        assert_eq!(codes(&plain), vec![("GS316".into(), 11)]);
        // Two different classes passed: which one runs is not known, nothing is assumed.
        let two = src.replace(
            "Merge if i == 0 else None",
            "Merge if i == 0 else nn.Identity",
        );
        assert!(codes(&two).is_empty());
    }

    #[test]
    fn only_the_loss_of_a_training_step_dict_counts() {
        // `{"loss": ..., "z": ...}`: the live `z` beside the loss does not train the encoder.
        let src = format!("{LIT}    def training_step(self, batch, i):\n        z = self.encoder(batch)\n        loss = ((self.decoder(z.detach()) - batch) ** 2).mean()\n        return {{\"loss\": loss, \"z\": z}}\n\n    def configure_optimizers(self):\n        return torch.optim.Adam(self.parameters())\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 13)]);
    }

    const HF: &str = "import torch\nfrom transformers import Trainer\n\nclass MyTrainer(Trainer):\n    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):\n        labels = inputs.pop(\"labels\")\n        outputs = model(**inputs)\n";

    #[test]
    fn flags_a_detach_in_a_trainer_compute_loss() {
        // The Trainer calls backward on compute_loss's loss (the first of `(loss, outputs)`)
        // and its optimizer holds the `model` it passes in.
        let src = format!("{HF}        logits = outputs.logits.detach()\n        loss = torch.nn.functional.cross_entropy(logits, labels)\n        return (loss, outputs) if return_outputs else loss\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 8)]);
    }

    #[test]
    fn a_correct_compute_loss_and_a_teacher_are_fine() {
        let src = format!("{HF}        loss = torch.nn.functional.cross_entropy(outputs.logits, labels)\n        return (loss, outputs) if return_outputs else loss\n");
        assert!(codes(&src).is_empty());
        // Distillation: the teacher runs under no_grad and is not the trained model.
        let src = format!("{HF}        with torch.no_grad():\n            teacher = self.teacher(**inputs).logits\n        kd = ((outputs.logits - teacher) ** 2).mean()\n        loss = outputs.loss + kd\n        return (loss, outputs) if return_outputs else loss\n");
        assert!(codes(&src).is_empty());
    }

    #[test]
    fn parts_of_a_model_passed_to_a_helper() {
        // The helper detaches one submodule of the model it is given; the head trains.
        let src = "import torch\nimport torch.nn as nn\n\ndef features(model, x):\n    return model.backbone(x).detach()\n\nmodel = nn.Module()\nmodel.backbone = nn.Linear(4, 4)\nmodel.head = nn.Linear(4, 1)\nopt = torch.optim.Adam(model.parameters())\nfor x in data:\n    loss = model.head(features(model, x)).mean()\n    loss.backward()\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS316".into(), 5)]);
        // An attribute of a tensor passed in (`mu.T`) is that tensor: the encoder stays live
        // through `reg`, its detached use elsewhere is a stop-gradient.
        let src = "import torch\nimport torch.nn as nn\n\ndef reg(mu):\n    return (mu.T ** 2).mean()\n\nenc = nn.Linear(4, 2)\nhead = nn.Linear(2, 1)\nopt = torch.optim.Adam(list(enc.parameters()) + list(head.parameters()))\nfor x in data:\n    z = enc(x)\n    loss = head(z.detach()).mean() + reg(z)\n    loss.backward()\n    opt.step()\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn flags_a_detach_before_a_frameworks_backward() {
        // accelerate / Fabric / DeepSpeed: the loss is the argument of `X.backward(loss)`.
        let src = "import torch\nimport torch.nn as nn\n\nenc = nn.Linear(4, 2)\nhead = nn.Linear(2, 1)\nopt = torch.optim.Adam(list(enc.parameters()) + list(head.parameters()))\nfor x in data:\n    loss = head(enc(x).detach()).mean()\n    accelerator.backward(loss)\n    opt.step()\n";
        assert_eq!(codes(src), vec![("GS316".into(), 8)]);
    }

    #[test]
    fn flags_a_detach_inside_the_loop_over_blocks() {
        // Statements of one iteration run in order: the last value of `x` is the cut one.
        let src = "import torch.nn as nn\n\nclass Stack(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])\n\n    def forward(self, x):\n        for block in self.blocks:\n            x = block(x)\n            x = x.detach()\n        return x\n";
        assert_eq!(codes(src), vec![("GS316".into(), 11)]);
    }

    #[test]
    fn flags_submodules_built_by_factories_and_library_classes() {
        // torchvision's `norm_layer(dim)`, transformers' `Conv1D(...)` from another file.
        let src = "import torch.nn as nn\nfrom .utils import Conv1D\n\nclass Block(nn.Module):\n    def __init__(self, dim, norm_layer, mlp_layer):\n        super().__init__()\n        self.ln = norm_layer(dim)\n        self.mlp = mlp_layer(dim)\n        self.proj = Conv1D(dim, dim)\n        self.act = nn.GELU()\n\n    def forward(self, x):\n        y = self.ln(x)\n        y = y.detach()\n        return x + self.proj(self.act(self.mlp(y)))\n";
        assert_eq!(codes(src), vec![("GS316".into(), 14)]);
    }

    #[test]
    fn flags_a_model_under_a_pretrained_base_and_a_method_passed_as_a_value() {
        // `BertModel(BertPreTrainedModel)` whose base has no `forward`; DistilBERT's
        // `apply_chunking_to_forward(self.ff_chunk, ...)`.
        let src = "import torch.nn as nn\nfrom ...modeling_utils import PreTrainedModel, apply_chunking_to_forward\n\nclass Base(PreTrainedModel):\n    config_class = None\n\nclass FFN(Base):\n    def __init__(self, config):\n        super().__init__(config)\n        self.lin1 = nn.Linear(4, 8)\n\n    def forward(self, x):\n        return apply_chunking_to_forward(self.ff_chunk, 0, 1, x)\n\n    def ff_chunk(self, x):\n        x = self.lin1(x)\n        return x.detach()\n";
        assert_eq!(codes(src), vec![("GS316".into(), 17)]);
    }

    #[test]
    fn stateless_layers_and_base_methods_are_no_source() {
        // Predictions next to the logits: softmax and a base class's method hold no weights.
        let src = "import torch.nn as nn\nfrom ...modeling_utils import PreTrainedModel\n\nclass Clf(PreTrainedModel):\n    def __init__(self, config):\n        super().__init__(config)\n        self.head = nn.Linear(4, 3)\n        self.softmax = nn.Softmax(-1)\n\n    def forward(self, x):\n        logits = self.head(x)\n        ids = self.get_input_embeddings()(x).argmax(-1)\n        return logits, self.softmax(logits).argmax(-1), ids\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn a_submodule_the_class_freezes_itself_is_fine() {
        // ESMFold: the language model is frozen in `__init__`, its features detached.
        let src = "import torch.nn as nn\nfrom .esm import EsmModel\n\nclass Fold(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n        self.esm = EsmModel(config)\n        self.esm.requires_grad_(False)\n        self.trunk = nn.Linear(4, 4)\n\n    def forward(self, x):\n        feats = self.esm(x).detach()\n        return self.trunk(feats)\n\nclass Probe(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n        self.backbone = EsmModel(config)\n        for p in self.backbone.parameters():\n            p.requires_grad = False\n        self.head = nn.Linear(4, 2)\n\n    def forward(self, x):\n        return self.head(self.backbone(x).detach())\n";
        assert!(codes(src).is_empty());
    }

    /// A module class with a backbone, a head and a forward body given by the test.
    fn in_forward(body: &str) -> String {
        format!("import torch\nimport torch.nn as nn\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.backbone = nn.Linear(4, 4)\n        self.head = nn.Linear(4, 2)\n        self.checkpointing = False\n\n{body}")
    }

    #[test]
    fn a_cut_in_the_arm_that_trains_while_another_implementation_is_live() {
        // timm's `if grad_checkpointing: checkpoint_seq(...) else: blocks(x)`: one call runs
        // one arm; the cut in the plain arm is the bug even though the other arm is live.
        let src = in_forward("    def forward(self, x):\n        if self.checkpointing and not torch.jit.is_scripting():\n            x = checkpoint(self.backbone, x)\n        else:\n            x = self.backbone(x)\n            x = x.detach()\n        return self.head(x)\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 16)]);
        // `if a: ... elif b: ... else: <cut>`, and a value made before the `if` that only
        // the arms use (a stem ahead of the blocks).
        let src = in_forward("    def forward(self, x, mask=None):\n        x = self.backbone(x)\n        if mask is not None:\n            x = x * mask\n        elif self.checkpointing:\n            x = checkpoint(torch.relu, x)\n        else:\n            x = torch.relu(x).detach()\n        return self.head(x)\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 18)]);
    }

    #[test]
    fn a_cut_after_a_fast_path_that_returns() {
        // torch's TransformerEncoderLayer: the fused fast path returns early; the plain path
        // after it is the one training runs.
        let src = in_forward("    def forward(self, x):\n        why_not = \"\"\n        if x.dim() != 2:\n            why_not = \"dim\"\n        if not why_not:\n            return torch._fused(x, self.backbone.weight, self.backbone.bias)\n        h = self.backbone(x).detach()\n        return self.head(h)\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 17)]);
    }

    #[test]
    fn a_helper_whose_chosen_arm_cuts() {
        // timm's `global_pool_nlc(x, pool_type='token')`: an early return for no pooling, the
        // token arm cut, the other pool types live.
        let src = "import torch.nn as nn\n\ndef pool(x, pool_type='token'):\n    if not pool_type:\n        return x\n    if pool_type == 'token':\n        x = x[:, 0].detach()\n    else:\n        x = x.mean(dim=1)\n    return x\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.blocks = nn.Linear(4, 4)\n        self.head = nn.Linear(4, 2)\n\n    def forward(self, x):\n        return self.head(pool(self.blocks(x), pool_type='token'))\n";
        assert_eq!(codes(src), vec![("GS316".into(), 7)]);
    }

    #[test]
    fn a_cut_in_a_residual_arm_without_else() {
        // torchvision's MBConv: `if self.use_res_connect:` computes the residual branch; the
        // path without it is another configuration, not a rival that trains the block.
        let src = in_forward("    def forward(self, x):\n        r = self.backbone(x)\n        if self.checkpointing:\n            r = torch.relu(r)\n            r = r.detach()\n            r += x\n        return self.head(r)\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 15)]);
    }

    #[test]
    fn an_attention_mask_built_from_the_embeddings_carries_no_gradient() {
        // transformers' `create_causal_mask(inputs_embeds=...)` reads shape and dtype only:
        // the detached embeddings are not trained through the mask.
        let src = in_forward("    def forward(self, ids):\n        emb = self.backbone(ids)\n        mask = create_causal_mask(config=None, inputs_embeds=emb)\n        h = emb.detach()\n        return self.head(h) * mask\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 14)]);
        // Applying a mask to a value is differentiable in the value.
        let src = in_forward("    def forward(self, ids, m):\n        emb = self.backbone(ids)\n        kept = apply_mask(emb, m)\n        h = emb.detach()\n        return self.head(h) + kept\n");
        assert!(codes(&src).is_empty());
    }

    #[test]
    fn a_head_of_this_file_that_detaches_its_input_cuts_the_trunk() {
        // ELECTRA's classification head detaches the features it is given; the model returns
        // its logits beside the encoder's hidden states (for inspection, not training).
        let src = "import torch.nn as nn\n\nclass Head(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.dense = nn.Linear(4, 2)\n\n    def forward(self, features):\n        x = features[:, 0].detach()\n        return self.dense(x)\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.encoder = nn.Linear(4, 4)\n        self.classifier = Head()\n\n    def forward(self, x):\n        h = self.encoder(x)\n        logits = self.classifier(h)\n        return SequenceClassifierOutput(logits=logits, hidden_states=(h,), attentions=None)\n";
        assert_eq!(codes(src), vec![("GS316".into(), 9)]);
        // The head trains the trunk: quiet.
        assert!(codes(&src.replace("features[:, 0].detach()", "features[:, 0]")).is_empty());
        // A result field (boxes, a last hidden state) trains what it comes from: quiet.
        assert!(codes(&src.replace("hidden_states=(h,)", "last_hidden_state=h")).is_empty());
    }

    #[test]
    fn a_configurable_stop_gradient_stays_quiet() {
        // Without an `else`: the path where the test is false keeps the value live.
        let src = in_forward("    def forward(self, x):\n        h = self.backbone(x)\n        if self.checkpointing:\n            h = h.detach()\n        return self.head(h)\n");
        assert!(codes(&src).is_empty());
        // A test that names the choice (freezing, a phase, training vs evaluation).
        for test in [
            "self.freeze_backbone",
            "epoch < warmup_epochs",
            "not self.training",
            "self.mode == \"linear_probe\"",
        ] {
            let src = in_forward(&format!("    def forward(self, x, epoch=0, warmup_epochs=1):\n        if {test}:\n            h = self.backbone(x).detach()\n        else:\n            h = self.backbone(x)\n        return self.head(h)\n"));
            assert!(codes(&src).is_empty(), "{test}");
        }
        // A test inside a loop: iterations may take different arms.
        let src = in_forward("    def forward(self, x):\n        for i in range(3):\n            if i == 0:\n                x = self.backbone(x).detach()\n            else:\n                x = self.backbone(x)\n        return self.head(x)\n");
        assert!(codes(&src).is_empty());
        // An early return of detached features: a mode of the module, not the training path.
        let src = in_forward("    def forward(self, x, return_features=False):\n        h = self.backbone(x)\n        if return_features:\n            return h.detach()\n        return self.head(h)\n");
        assert!(codes(&src).is_empty());
        let src = in_forward("    def forward(self, x, return_features=False):\n        h = self.backbone(x)\n        if not return_features:\n            return self.head(h)\n        else:\n            return h.detach()\n");
        assert!(codes(&src).is_empty());
    }

    #[test]
    fn a_helpers_choice_is_made_per_call() {
        // Its test is per call: one call detaches, the other trains the backbone.
        let src = in_forward("    def embed(self, x, sg):\n        if sg:\n            return self.backbone(x).detach()\n        return self.backbone(x)\n\n    def forward(self, a, b):\n        return self.head(self.embed(a, True)) + self.head(self.embed(b, False))\n");
        assert!(codes(&src).is_empty());
        // One call, its choice made by a flag: as an `if` in `forward` would be, the arm
        // that cuts is reported (the backbone trains only under the other setting).
        let src = in_forward("    def embed(self, x, sg):\n        if sg:\n            h = self.backbone(x).detach()\n        else:\n            h = self.backbone(x)\n        return h\n\n    def forward(self, a):\n        return self.head(self.embed(a, True))\n");
        assert_eq!(codes(&src), vec![("GS316".into(), 13)]);
    }

    /// PEFT's `lora.Linear(nn.Module, LoraLayer)`: the adapters are built by the mixin (in its
    /// `__init__`, filled by `update_layer`), and `forward` reads them out of `ModuleDict`s.
    #[test]
    fn submodules_a_base_class_of_the_file_builds_are_the_modules() {
        let src = "import torch\nimport torch.nn as nn\n\n\nclass LoraLayer:\n    def __init__(self, base_layer: nn.Module, **kwargs) -> None:\n        self.base_layer = base_layer\n        self.lora_A = nn.ModuleDict({})\n        self.lora_B = nn.ModuleDict({})\n        self.lora_dropout = nn.ModuleDict({})\n        self.scaling = {}\n\n    def update_layer(self, adapter_name, r):\n        self.lora_A[adapter_name] = nn.Linear(4, r, bias=False)\n        self.lora_B[adapter_name] = nn.Linear(r, 4, bias=False)\n        self.lora_dropout[adapter_name] = nn.Identity()\n\n\nclass Linear(nn.Module, LoraLayer):\n    def __init__(self, base_layer, adapter_name, r=8):\n        super().__init__()\n        LoraLayer.__init__(self, base_layer)\n        self.update_layer(adapter_name, r)\n        self.active_adapters = [adapter_name]\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        result = self.base_layer(x)\n        for active_adapter in self.active_adapters:\n            if active_adapter not in self.lora_A.keys():\n                continue\n            lora_A = self.lora_A[active_adapter]\n            lora_B = self.lora_B[active_adapter]\n            dropout = self.lora_dropout[active_adapter]\n            scaling = self.scaling[active_adapter]\n            x = x.to(lora_A.weight.dtype)\n            result = result + lora_B(lora_A(dropout(x))) * scaling\n        result = result.detach()\n        return result\n";
        assert_eq!(codes(src), vec![("GS316".into(), 37)]);
        let fine = src.replace("        result = result.detach()\n", "");
        assert!(codes(&fine).is_empty());
    }

    #[test]
    fn flags_a_detach_in_a_per_level_head_collected_in_a_list() {
        // A detection head run on each feature level, its outputs appended to a list (or put
        // in with extend / insert) and concatenated: the list holds what was put in it.
        for put in ["outs.append(y)", "outs.extend([y])", "outs.insert(0, y)"] {
            let src = format!("{MODEL}    def forward(self, levels):\n        outs = []\n        for x in levels:\n            h = self.backbone(x)\n            h = h.detach()\n            y = self.head(h)\n            {put}\n        return torch.cat(outs, dim=1)\n");
            assert_eq!(codes(&src), vec![("GS316".into(), 14)], "{put}");
        }
        // The detached copy goes to a log list, the live value to the result: quiet.
        let src = format!("{MODEL}    def forward(self, levels):\n        outs, logged = [], []\n        for x in levels:\n            h = self.backbone(x)\n            logged.append(h.detach())\n            outs.append(self.head(h))\n        return torch.cat(outs, dim=1)\n");
        assert!(codes(&src).is_empty());
    }

    const CONV: &str = "import torch\nfrom torch import Tensor\nfrom torch.nn import Linear, Parameter\nfrom torch_geometric.nn.conv import MessagePassing\nfrom torch_geometric.utils import softmax\n\nclass AttnConv(MessagePassing):\n    def __init__(self, d):\n        super().__init__(aggr=\"add\")\n        self.lin = Linear(d, d)\n        self.att = Parameter(torch.empty(1, d))\n\n    def forward(self, x: Tensor, edge_index) -> Tensor:\n        x = self.lin(x)\n        a = (x * self.att).sum(-1)\n        alpha = self.edge_updater(edge_index, a=a)\n        return self.propagate(edge_index, x=x, alpha=alpha)\n\n    def edge_update(self, a_j: Tensor, a_i: Tensor, index, ptr, size_i) -> Tensor:\n        alpha = softmax(a_j + a_i, index, ptr, size_i)\n        return alpha\n\n    def message(self, x_j: Tensor, alpha: Tensor) -> Tensor:\n        return alpha.unsqueeze(-1) * x_j\n";

    #[test]
    fn the_hooks_a_message_passing_layer_runs_through_propagate() {
        // PyTorch Geometric runs `edge_update` from `self.edge_updater(...)` and `message` from
        // `self.propagate(...)`, their parameters filled from the keywords (`a_j`: `a` at
        // the edges' sources): a cut inside either is a cut of what was passed.
        assert!(codes(CONV).is_empty());
        let cut_alpha = CONV.replace("        return alpha\n", "        return alpha.detach()\n");
        assert_eq!(codes(&cut_alpha), vec![("GS316".into(), 21)]);
        let cut_message = CONV.replace(
            "alpha.unsqueeze(-1) * x_j",
            "alpha.detach().unsqueeze(-1) * x_j",
        );
        assert_eq!(codes(&cut_message), vec![("GS316".into(), 24)]);
        // (`x_j` cut while `alpha` carries `self.lin` live, and one end of an edge cut while
        // the other carries `self.att`: quiet.)
        let x_cut = CONV.replace(
            "alpha.unsqueeze(-1) * x_j",
            "alpha.unsqueeze(-1) * x_j.detach()",
        );
        assert!(codes(&x_cut).is_empty());
        let one_side = CONV.replace("a_j + a_i", "a_j.detach() + a_i");
        assert!(codes(&one_side).is_empty());
        // An `aggregate` the layer overrides gets what `message` returned.
        let agg = format!("{CONV}\n    def aggregate(self, inputs: Tensor, index: Tensor) -> Tensor:\n        return inputs.detach()\n");
        assert_eq!(codes(&agg), vec![("GS316".into(), 27)]);
    }
}
