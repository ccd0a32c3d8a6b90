//! GS323: an optimizer given some submodules of a model and not others that are not frozen.

use std::collections::{BTreeSet, HashMap};

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, ModModule, Stmt};
use ruff_text_size::{Ranged, TextRange};

use super::optimizer_before_replace::{is_optimizer_call, parameter_owners};
use super::Rule;
use crate::checker::{call_name, Checker};

pub const RULE: Rule = Rule { code: "GS323" };

fn has_parameters(ck: &Checker, e: &Expr) -> bool {
    let Some(name) = call_name(e) else {
        return false;
    };
    let last = name.rsplit('.').next().unwrap_or(&name);
    if last == "Parameter" {
        return true;
    }
    if !ck.constructs_module(e) || ck.builds_parameter_free(&name) {
        return false;
    }
    if matches!(last, "Sequential" | "ModuleList") {
        let Expr::Call(c) = e else { return false };
        return c.arguments.args.iter().any(|a| match a {
            Expr::List(l) => l.elts.iter().any(|x| has_parameters(ck, x)),
            other => has_parameters(ck, other),
        });
    }
    true
}

struct Scan<'c, 'a> {
    ck: &'c Checker<'a>,
    /// class -> (submodule with parameters -> assigned)
    classes: HashMap<String, BTreeSet<String>>,
    optimizers: Vec<(TextRange, Vec<String>)>,
    freezes: bool,
    class: Option<String>,
    /// `groups = [{"params": model.a.parameters()}, ...]`: the owners a name holds.
    named: HashMap<String, Vec<String>>,
}

impl<'a> Visitor<'a> for Scan<'_, 'a> {
    fn visit_stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::ClassDef(c) => {
                let saved = self.class.replace(c.name.id.to_string());
                visitor::walk_stmt(self, s);
                self.class = saved;
                return;
            }
            Stmt::Assign(a) => {
                let mut owners = Vec::new();
                parameter_owners(&a.value, &mut owners);
                for t in &a.targets {
                    if let (Expr::Name(n), false) = (t, owners.is_empty()) {
                        self.named.insert(n.id.to_string(), owners.clone());
                    }
                    if let Expr::Attribute(at) = t {
                        if at.attr.id.as_str() == "requires_grad"
                            && matches!(a.value.as_ref(), Expr::BooleanLiteral(b) if !b.value)
                        {
                            self.freezes = true;
                        }
                        if let (Some(class), Expr::Name(n)) = (&self.class, at.value.as_ref()) {
                            if n.id.as_str() == "self"
                                && self.ck.is_module_class(class)
                                && has_parameters(self.ck, &a.value)
                            {
                                self.classes
                                    .entry(class.clone())
                                    .or_default()
                                    .insert(at.attr.id.to_string());
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        visitor::walk_stmt(self, s);
    }

    fn visit_expr(&mut self, e: &'a Expr) {
        if let Expr::Call(c) = e {
            if call_name(e).is_some_and(|n| n.to_ascii_lowercase().contains("freeze")) {
                self.freezes = true;
            }
            if let Expr::Attribute(a) = c.func.as_ref() {
                match a.attr.id.as_str() {
                    "freeze" | "eval_freeze" => self.freezes = true,
                    // `x.requires_grad_()` / `(True)` asks for gradients (of data, for a
                    // force or a saliency map): only `False`, or a flag, may freeze.
                    "requires_grad_" => {
                        let arg = c.arguments.args.first().or_else(|| {
                            c.arguments
                                .keywords
                                .iter()
                                .find(|k| {
                                    k.arg
                                        .as_ref()
                                        .is_some_and(|n| n.id.as_str() == "requires_grad")
                                })
                                .map(|k| &k.value)
                        });
                        if arg.is_some_and(|v| !matches!(v, Expr::BooleanLiteral(b) if b.value)) {
                            self.freezes = true;
                        }
                    }
                    _ => {}
                }
            }
            if is_optimizer_call(e) {
                let mut owners = Vec::new();
                parameter_owners(e, &mut owners);
                for a in c.arguments.args.iter() {
                    if let Expr::Name(n) = a {
                        owners.extend(self.named.get(n.id.as_str()).cloned().unwrap_or_default());
                    }
                }
                self.optimizers.push((e.range(), owners));
            }
        }
        visitor::walk_expr(self, e);
    }
}

/// Whether the model `root` runs whole somewhere in the module: it is called (`model(x)`),
/// or handed to a function of this file that calls the parameter it lands in
/// (`compute_loss(self.model, batch)` with `def compute_loss(model, batch): model(**batch)`).
fn runs_whole(ck: &Checker, module: &ModModule, root: &str) -> bool {
    /// Whether `name` (dotted) is called anywhere in `body`.
    fn called(body: &[Stmt], name: &str) -> bool {
        struct Find<'n>(&'n str, bool);
        impl<'a> Visitor<'a> for Find<'_> {
            fn visit_expr(&mut self, e: &'a Expr) {
                if let Expr::Call(c) = e {
                    if crate::checker::dotted(&c.func).as_deref() == Some(self.0) {
                        self.1 = true;
                    }
                }
                visitor::walk_expr(self, e);
            }
        }
        let mut find = Find(name, false);
        for s in body {
            find.visit_stmt(s);
        }
        find.1
    }
    /// The functions `root` is handed to: (name, through `self.`, positional index or keyword).
    struct Handed<'r> {
        root: &'r str,
        to: Vec<(String, bool, Result<usize, String>)>,
    }
    impl<'a> Visitor<'a> for Handed<'_> {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Call(c) = e {
                let callee = match c.func.as_ref() {
                    Expr::Name(n) => Some((n.id.to_string(), false)),
                    Expr::Attribute(a) if matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self") => {
                        Some((a.attr.id.to_string(), true))
                    }
                    _ => None,
                };
                if let Some((name, method)) = callee {
                    let is_root =
                        |x: &Expr| crate::checker::dotted(x).as_deref() == Some(self.root);
                    for (i, a) in c.arguments.args.iter().enumerate() {
                        if is_root(a) {
                            self.to.push((name.clone(), method, Ok(i)));
                        }
                    }
                    for k in &c.arguments.keywords {
                        if let (Some(arg), true) = (&k.arg, is_root(&k.value)) {
                            self.to
                                .push((name.clone(), method, Err(arg.id.to_string())));
                        }
                    }
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    if called(&module.body, root) {
        return true;
    }
    let mut handed = Handed {
        root,
        to: Vec::new(),
    };
    for s in &module.body {
        handed.visit_stmt(s);
    }
    handed.to.iter().any(|(name, method, at)| {
        let Some(f) = ck.defs.get(name) else {
            return false;
        };
        let params = crate::flow::param_names(&f.parameters);
        let param = match at {
            Ok(i) => params.get(i + usize::from(*method)),
            Err(k) => params.iter().find(|p| *p == k),
        };
        param.is_some_and(|p| called(&f.body, p))
    })
}

pub fn check(ck: &mut Checker, module: &ModModule) {
    if !ck.source.contains("parameters()") {
        return;
    }
    let mut scan = Scan {
        ck,
        classes: HashMap::new(),
        optimizers: Vec::new(),
        freezes: false,
        class: None,
        named: HashMap::new(),
    };
    for s in &module.body {
        scan.visit_stmt(s);
    }
    if scan.freezes {
        return;
    }
    let mut hits = Vec::new();
    for (range, owners) in &scan.optimizers {
        // Every group is `ROOT.sub.parameters()` with one ROOT (a name, or a model held in
        // an attribute: `self.model.encoder`).
        let parts: Option<Vec<(&str, &str)>> = owners.iter().map(|o| o.rsplit_once('.')).collect();
        let Some(parts) = parts.filter(|p| !p.is_empty()) else {
            continue;
        };
        let root = parts[0].0;
        if parts.iter().any(|(r, _)| *r != root) {
            continue;
        }
        let used: BTreeSet<&str> = parts.iter().map(|(_, s)| *s).collect();
        // Another optimizer holding the whole model or the rest covers it.
        let candidates: Vec<&BTreeSet<String>> = scan
            .classes
            .values()
            .filter(|subs| used.iter().all(|u| subs.contains(*u)))
            .collect();
        let subs = match candidates.as_slice() {
            [subs] => *subs,
            // A model whose class is not in this file (a library's, another file's): its
            // other submodules are unknown, but when this is the only optimizer over it and the
            // whole model runs (`model(x)`), the rest gets gradients nothing applies.
            [] if !scan.classes.contains_key(root)
                && scan.optimizers.len() == 1
                && runs_whole(scan.ck, module, root) =>
            {
                let used: Vec<String> = used.iter().map(|s| format!("`{root}.{s}`")).collect();
                hits.push((
                    *range,
                    format!("everything of `{root}` but {}", used.join(", ")),
                ));
                continue;
            }
            _ => continue,
        };
        let missing: Vec<&String> = subs
            .iter()
            .filter(|s| !used.contains(s.as_str()))
            .filter(|s| {
                !scan.optimizers.iter().any(|(r, o)| {
                    r != range && o.iter().any(|x| x == root || x == &format!("{root}.{s}"))
                })
            })
            .collect();
        if !missing.is_empty() {
            hits.push((
                *range,
                missing
                    .iter()
                    .map(|s| format!("`{root}.{s}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        }
    }
    for (range, missing) in hits {
        let loc = ck.location(&range);
        ck.report(
            RULE.finding(format!("The optimizer's parameter groups leave out {missing}: those parameters get gradients and are never updated."))
                .at(Some(loc))
                .fix("Add the missing submodules to a parameter group (or freeze them with `requires_grad_(False)` if that is the intent)."),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    const DETECTOR: &str = "import torch\nimport torch.nn as nn\n\nclass Detector(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU())\n        self.neck = nn.Sequential(nn.Conv2d(16, 16, 1), nn.ReLU())\n        self.act = nn.ReLU()\n        self.head = nn.Conv2d(16, 8, 1)\n\n";

    #[test]
    fn flags_a_left_out_submodule() {
        let src = format!("{DETECTOR}def build(model):\n    groups = [{{'params': model.backbone.parameters(), 'lr': 1e-4}}, {{'params': model.head.parameters()}}]\n    return torch.optim.SGD(groups, lr=1e-3)\n");
        assert_eq!(codes(&src), vec![("GS323".into(), 14)]);
    }

    #[test]
    fn a_schedule_is_no_second_optimizer() {
        // Accelerate's set-up: the optimizer over one part, a learning-rate schedule over the
        // optimizer, both handed to `prepare` (an `lr_scheduler` class is no optimizer).
        let src = "import torch\nfrom torchvision.models import resnet18\n\nmodel = resnet18(num_classes=10)\noptimizer = torch.optim.AdamW(model.layer4.parameters(), lr=1e-3)\nscheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)\nmodel, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)\nfor x, y in data:\n    loss = crit(model(x), y)\n    accelerator.backward(loss)\n    optimizer.step()\n    scheduler.step()\n";
        assert_eq!(codes(src), vec![("GS323".into(), 5)]);
        for schedule in [
            "torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=10)",
            "torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)",
            "torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, 10)",
            "torch.optim.swa_utils.SWALR(optimizer, swa_lr=0.05)",
        ] {
            let other = src.replace(
                "torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)",
                schedule,
            );
            assert_eq!(codes(&other), vec![("GS323".into(), 5)], "{schedule}");
        }
    }

    #[test]
    fn a_lightning_configure_optimizers_over_one_submodule() {
        let src = "import lightning as L\nimport torch\nfrom torch import nn\n\nclass Lit(L.LightningModule):\n    def __init__(self):\n        super().__init__()\n        self.encoder = nn.Linear(8, 4)\n        self.decoder = nn.Linear(4, 8)\n\n    def training_step(self, batch, i):\n        return ((self.decoder(self.encoder(batch)) - batch) ** 2).mean()\n\n    def configure_optimizers(self):\n        return torch.optim.Adam(self.encoder.parameters())\n";
        assert_eq!(codes(src), vec![("GS323".into(), 15)]);
        // A GAN's two optimizers, one per network: fine.
        let gan = src.replace(
            "return torch.optim.Adam(self.encoder.parameters())",
            "return [torch.optim.Adam(self.encoder.parameters()), torch.optim.Adam(self.decoder.parameters())]",
        );
        assert!(codes(&gan).is_empty());
    }

    #[test]
    fn an_optimizer_over_one_part_of_a_model_from_elsewhere() {
        let src = "import torch\nfrom torchvision.models import resnet18\n\nmodel = resnet18(num_classes=10)\noptimizer = torch.optim.SGD(model.fc.parameters(), lr=0.1)\nfor x, y in data:\n    loss = crit(model(x), y)\n    loss.backward()\n    optimizer.step()\n";
        assert_eq!(codes(src), vec![("GS323".into(), 5)]);
        // Linear probing with the backbone frozen, or a second optimizer for the rest: fine.
        let frozen = src.replace("optimizer = ", "freeze_backbone(model)\noptimizer = ");
        assert!(codes(&frozen).is_empty());
        let two = src.replace(
            "optimizer = torch.optim.SGD(model.fc.parameters(), lr=0.1)",
            "optimizer = torch.optim.SGD(model.fc.parameters(), lr=0.1)\nbody = torch.optim.SGD(model.layer4.parameters(), lr=0.01)",
        );
        assert!(codes(&two).is_empty());
    }

    #[test]
    fn a_model_held_in_an_attribute_and_run_through_a_function() {
        // A LightningModule holding a library model, which a loss function of the file runs.
        let src = "import lightning as L\nimport torch\nfrom transformers import AutoModel\n\ndef compute_loss(net, batch):\n    return net(**batch).loss\n\nclass Lit(L.LightningModule):\n    def __init__(self, model):\n        super().__init__()\n        self.model = model\n\n    def training_step(self, batch, i):\n        return compute_loss(self.model, batch)\n\n    def configure_optimizers(self):\n        return torch.optim.AdamW(self.model.classifier.parameters())\n";
        assert_eq!(codes(src), vec![("GS323".into(), 17)]);
        // Handed by keyword, or to a method: the same.
        let kw = src.replace(
            "compute_loss(self.model, batch)",
            "compute_loss(batch=batch, net=self.model)",
        );
        assert_eq!(codes(&kw), vec![("GS323".into(), 17)]);
        let method = src
            .replace("def compute_loss(net, batch):\n    return net(**batch).loss\n\n", "")
            .replace("return compute_loss(self.model, batch)", "return self.loss_of(self.model, batch)\n\n    def loss_of(self, net, batch):\n        return net(**batch).loss");
        assert_eq!(codes(&method), vec![("GS323".into(), 17)], "{method}");
        // Handed to a function that only reads it (an EMA copy, a logger): its other parts may
        // never run, so nothing is said.
        let reads = src.replace(
            "return net(**batch).loss",
            "return sum(p.sum() for p in net.parameters())",
        );
        assert!(codes(&reads).is_empty());
        // `load_model(` is not a call of `model`.
        let other = src.replace(
            "return compute_loss(self.model, batch)",
            "return load_model(batch)",
        );
        assert!(codes(&other).is_empty());
    }

    #[test]
    fn complete_groups_or_freezing_are_fine() {
        let all = format!("{DETECTOR}opt = torch.optim.SGD([{{'params': model.backbone.parameters()}}, {{'params': model.neck.parameters()}}, {{'params': model.head.parameters()}}], lr=0.1)\n");
        assert!(codes(&all).is_empty());
        let frozen = format!("{DETECTOR}model.neck.requires_grad_(False)\nopt = torch.optim.SGD([{{'params': model.backbone.parameters()}}, {{'params': model.head.parameters()}}], lr=0.1)\n");
        assert!(codes(&frozen).is_empty());
        let whole = format!("{DETECTOR}opt = torch.optim.SGD(model.head.parameters(), lr=0.1)\nopt2 = torch.optim.SGD(model.parameters(), lr=0.1)\n");
        assert!(codes(&whole).is_empty());
        // Freezing by a flag the file does not fix: maybe deliberate.
        let flag = format!("{DETECTOR}model.neck.requires_grad_(train_neck)\nopt = torch.optim.SGD([{{'params': model.backbone.parameters()}}, {{'params': model.head.parameters()}}], lr=0.1)\n");
        assert!(codes(&flag).is_empty());
    }

    #[test]
    fn gradients_asked_of_data_are_not_freezing() {
        // A force field: `x.requires_grad_(True)` for `autograd.grad(energy, x)` freezes
        // nothing; the optimizer still leaves out the neck.
        for ask in [
            "x.requires_grad_()",
            "x.requires_grad_(True)",
            "x.requires_grad_(requires_grad=True)",
        ] {
            let src = format!("{DETECTOR}opt = torch.optim.SGD([{{'params': model.backbone.parameters()}}, {{'params': model.head.parameters()}}], lr=0.1)\n{ask}\n");
            assert_eq!(codes(&src), vec![("GS323".into(), 12)], "{ask}");
        }
    }
}
