//! GS301: modules kept in a plain list/dict/tuple attribute of an `nn.Module`.

use std::collections::HashSet;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt, StmtAssign};

use super::Rule;
use crate::checker::{container_holds, dotted, Checker};

pub const RULE: Rule = Rule { code: "GS301" };

/// `torch.randn(..., requires_grad=True)`, `torch.zeros(...).requires_grad_()`: the call that
/// makes the tensor.
fn tensor_requiring_grad(e: &Expr) -> Option<&Expr> {
    let Expr::Call(c) = e else { return None };
    if let Expr::Attribute(a) = c.func.as_ref() {
        if a.attr.id.as_str() == "requires_grad_"
            && !matches!(c.arguments.args.first(), Some(Expr::BooleanLiteral(b)) if !b.value)
            && crate::checker::call_name(&a.value).is_some_and(|n| n.starts_with("torch."))
        {
            return Some(&a.value);
        }
    }
    let name = crate::checker::call_name(e)?;
    let flag = c.arguments.keywords.iter().any(|k| {
        k.arg
            .as_ref()
            .is_some_and(|n| n.id.as_str() == "requires_grad")
            && matches!(&k.value, Expr::BooleanLiteral(b) if b.value)
    });
    (flag && name.starts_with("torch.") && !name.ends_with("Parameter")).then_some(e)
}

/// `e` builds a module with parameters the optimizer would miss: not a parameter-free one (a
/// loss, an activation, dropout, pooling: a plain dict of losses loses nothing), nor one that
/// trains itself.
fn holds_parameters_of_its_own(ck: &Checker, e: &Expr) -> bool {
    ck.constructs_module(e)
        && !crate::checker::call_name(e)
            .is_some_and(|n| ck.self_optimizing.contains(&n) || ck.builds_parameter_free(&n))
}

/// A container of modules: a list/tuple/dict display or comprehension of module constructions,
/// `list(...)`/`tuple(...)`/`dict(...)` of one, a concatenation, or a local name the function
/// filled with modules (`layers = []` then `layers.append(Block(i))`).
fn holds_modules(ck: &Checker, e: &Expr, locals: &HashSet<String>) -> bool {
    let module = |x: &Expr| {
        holds_parameters_of_its_own(ck, x)
            || matches!(x, Expr::Name(n) if locals.contains(n.id.as_str()))
    };
    container_holds(e, &module, &|x: &Expr| match x {
        Expr::BinOp(b) => holds_modules(ck, &b.left, locals) || holds_modules(ck, &b.right, locals),
        Expr::Name(n) => locals.contains(n.id.as_str()),
        _ => false,
    })
}

/// `nn.Parameter(...)`, or a tensor made to require grad (`torch.ones(d, requires_grad=True)`).
fn makes_parameter(e: &Expr) -> bool {
    crate::checker::call_name(e).is_some_and(|n| {
        n == "Parameter" || n.ends_with("nn.Parameter") || n.ends_with("parameter.Parameter")
    }) || tensor_requiring_grad(e).is_some()
}

/// A container of parameters (or tensors that require grad): displays, comprehensions,
/// `list(...)` of one, a concatenation, a local name filled with them.
fn holds_parameters(e: &Expr, locals: &HashSet<String>, single: &HashSet<String>) -> bool {
    let leaf = |x: &Expr| {
        makes_parameter(x) || matches!(x, Expr::Name(n) if single.contains(n.id.as_str()))
    };
    container_holds(e, &leaf, &|x: &Expr| match x {
        Expr::BinOp(b) => {
            holds_parameters(&b.left, locals, single) || holds_parameters(&b.right, locals, single)
        }
        Expr::Name(n) => locals.contains(n.id.as_str()),
        _ => false,
    })
}

fn is_dict(e: &Expr) -> bool {
    match e {
        Expr::Dict(_) | Expr::DictComp(_) => true,
        Expr::Call(_) => crate::checker::call_name(e).is_some_and(|n| n == "dict"),
        _ => false,
    }
}

/// What a function body does with containers of modules.
#[derive(Debug, Clone, Default)]
pub struct LocalModules {
    /// Names (and `self.` attributes) it fills with modules: assigned a container of them, or
    /// appended, inserted, extended, indexed into.
    pub lists: HashSet<String>,
    /// Targets it (re)assigns a module: `self.layers = nn.ModuleList(self.layers)` after
    /// filling a plain list registers them after all.
    pub rewrapped: HashSet<String>,
    /// Names (and `self.` attributes) it fills with parameters or tensors that require grad.
    pub param_lists: HashSet<String>,
    /// It registers modules or parameters by name itself (`self.add_module(str(i), layer)`,
    /// `self.register_parameter(...)`).
    pub registers: bool,
}

impl LocalModules {
    /// Adds what `other` (another method of the class) does with `self.` attributes.
    pub fn merge_self(&mut self, other: LocalModules) {
        let own = |n: &String| n.starts_with("self.");
        self.lists.extend(other.lists.into_iter().filter(own));
        self.rewrapped
            .extend(other.rewrapped.into_iter().filter(own));
        self.param_lists
            .extend(other.param_lists.into_iter().filter(own));
    }
}

/// What a function body does with containers of modules.
pub fn local_module_lists(ck: &Checker, body: &[Stmt]) -> LocalModules {
    struct Fill<'c, 'a> {
        ck: &'c Checker<'a>,
        single: HashSet<String>,
        lists: HashSet<String>,
        rewrapped: HashSet<String>,
        registers: bool,
        params: HashSet<String>,
        param_lists: HashSet<String>,
    }
    impl Fill<'_, '_> {
        fn param(&self, e: &Expr) -> bool {
            makes_parameter(e) || matches!(e, Expr::Name(n) if self.params.contains(n.id.as_str()))
        }
        fn param_container(&self, e: &Expr) -> bool {
            holds_parameters(e, &self.param_lists, &self.params) && !self.param(e)
        }
        // A name bound to any module, parameter-free or not: bound to `nn.Identity()` in one
        // arm, it may hold a norm layer from a resolver in the other (PyTorch Geometric's
        // `BasicGNN`).
        fn module(&self, e: &Expr) -> bool {
            self.ck.constructs_module(e)
                || matches!(e, Expr::Name(n) if self.single.contains(n.id.as_str()))
                // A copy of one (`copy.deepcopy(layer)`, torch's `_get_clones`).
                || match e {
                    Expr::Call(c) => {
                        crate::checker::call_name(e)
                            .is_some_and(|n| n == "copy.deepcopy" || n == "deepcopy")
                            && c.arguments.args.first().is_some_and(|a| self.module(a))
                    }
                    _ => false,
                }
        }
        fn container(&self, e: &Expr) -> bool {
            let mut both = self.lists.clone();
            both.extend(self.single.iter().cloned());
            holds_modules(self.ck, e, &both) && !self.module(e)
        }
    }
    impl<'b> Visitor<'b> for Fill<'_, '_> {
        fn visit_stmt(&mut self, s: &'b Stmt) {
            match s {
                Stmt::FunctionDef(_) | Stmt::ClassDef(_) => return,
                Stmt::Assign(a) => {
                    for t in &a.targets {
                        if self.ck.constructs_module(&a.value) {
                            if let Some(d) = dotted(t) {
                                self.rewrapped.insert(d);
                            }
                        }
                        match t {
                            Expr::Name(n) if self.param(&a.value) => {
                                self.params.insert(n.id.to_string());
                            }
                            Expr::Name(n) if self.param_container(&a.value) => {
                                self.param_lists.insert(n.id.to_string());
                            }
                            Expr::Name(n) if self.module(&a.value) => {
                                self.single.insert(n.id.to_string());
                            }
                            Expr::Name(n) if self.container(&a.value) => {
                                self.lists.insert(n.id.to_string());
                            }
                            // `heads[k] = ...`, `self.lora_A[name] = nn.Linear(...)`.
                            Expr::Subscript(sub) if self.module(&a.value) => {
                                if let Some(n) = dotted(sub.value.as_ref()) {
                                    self.lists.insert(n);
                                }
                            }
                            _ => {}
                        }
                    }
                }
                Stmt::AugAssign(a) => {
                    if let Some(n) = dotted(a.target.as_ref()) {
                        if self.container(&a.value) {
                            self.lists.insert(n.clone());
                        }
                        if self.param_container(&a.value) {
                            self.param_lists.insert(n);
                        }
                    }
                }
                Stmt::Expr(e) => {
                    if let Expr::Call(c) = e.value.as_ref() {
                        // Modules put into a registered submodule's tree by path, the
                        // container only an index of them: `setattr(parent, name, m)`, a
                        // helper that does it (x-transformers' `set_module_by_path(net, path,
                        // wrapper)`, `_set_module`, `replace_module`).
                        if let Expr::Name(f) = c.func.as_ref() {
                            let f = f.id.as_str();
                            if f == "setattr"
                                || f.contains("set_module")
                                || f.contains("set_submodule")
                                || f.contains("replace_module")
                            {
                                self.registers = true;
                            }
                        }
                        if let Expr::Attribute(at) = c.func.as_ref() {
                            // `layers.append(...)`, and `self.layer.append(...)` after
                            // `self.layer = list()`.
                            // `self.add_module(...)`, or `net.set_submodule(path, wrapper)` on
                            // any module of the tree.
                            let attr = at.attr.id.as_str();
                            let on_self = matches!(at.value.as_ref(), Expr::Name(n) if n.id.as_str() == "self");
                            if attr == "set_submodule"
                                || (on_self
                                    && matches!(
                                        attr,
                                        "add_module" | "register_module" | "register_parameter"
                                    ))
                            {
                                self.registers = true;
                            }
                            // A module container (`extra = nn.ModuleList(...)`) is not plain.
                            if let Some(n) = dotted(&at.value).filter(|n| !self.single.contains(n))
                            {
                                let filled = match at.attr.id.as_str() {
                                    "append" => {
                                        c.arguments.args.first().is_some_and(|x| self.module(x))
                                    }
                                    "insert" => {
                                        c.arguments.args.get(1).is_some_and(|x| self.module(x))
                                    }
                                    "extend" => {
                                        c.arguments.args.first().is_some_and(|x| self.container(x))
                                    }
                                    _ => false,
                                };
                                let params = match at.attr.id.as_str() {
                                    "append" => {
                                        c.arguments.args.first().is_some_and(|x| self.param(x))
                                    }
                                    "insert" => {
                                        c.arguments.args.get(1).is_some_and(|x| self.param(x))
                                    }
                                    "extend" => c
                                        .arguments
                                        .args
                                        .first()
                                        .is_some_and(|x| self.param_container(x)),
                                    _ => false,
                                };
                                if params {
                                    self.param_lists.insert(n.clone());
                                }
                                if filled {
                                    self.lists.insert(n);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
            visitor::walk_stmt(self, s);
        }
    }
    let mut f = Fill {
        ck,
        single: HashSet::new(),
        lists: HashSet::new(),
        rewrapped: HashSet::new(),
        registers: false,
        params: HashSet::new(),
        param_lists: HashSet::new(),
    };
    // Twice: a name filled before it is known to hold modules (`blocks += [layer]` after
    // `layer = Block()` in a loop) settles on the second pass.
    for _ in 0..2 {
        for s in body {
            f.visit_stmt(s);
        }
    }
    let lists = f.lists.difference(&f.single).cloned().collect();
    LocalModules {
        lists,
        param_lists: f.param_lists.difference(&f.params).cloned().collect(),
        rewrapped: f.rewrapped,
        registers: f.registers,
    }
}

pub fn check(ck: &mut Checker, a: &StmtAssign) {
    if !ck.in_module_class() {
        return;
    }
    let [target] = a.targets.as_slice() else {
        return;
    };
    let Some(name) = dotted(target) else { return };
    let Some(attr) = name.strip_prefix("self.") else {
        return;
    };
    if let Some(factory) = tensor_requiring_grad(a.value.as_ref()) {
        let loc = ck.location(a);
        let value = &ck.source[ruff_text_size::Ranged::range(factory).start().to_usize()
            ..ruff_text_size::Ranged::range(factory).end().to_usize()];
        let value = value
            .replace(", requires_grad=True", "")
            .replace(".requires_grad_()", "");
        let finding = RULE
            .finding(format!("`self.{attr}` is a tensor with requires_grad=True, not an nn.Parameter: `model.parameters()` skips it, so no optimizer built from it updates it."))
            .at(Some(loc))
            .fix(format!("self.{attr} = nn.Parameter({value})"));
        match ck.nn_prefix.clone() {
            Some(nn) => ck.report_with_edit(
                finding,
                ruff_text_size::Ranged::range(a.value.as_ref()),
                format!("{nn}.Parameter({value})"),
            ),
            None => ck.report(finding),
        }
        return;
    }
    let local = ck.module_lists.last().cloned().unwrap_or_default();
    if local.registers || local.rewrapped.contains(name.as_str()) {
        return;
    }
    let locals = local.lists;
    let empty = match a.value.as_ref() {
        Expr::List(l) => l.elts.is_empty(),
        Expr::Dict(d) => d.items.is_empty(),
        // `list()`, `dict()`, `dict({})`, `list([])`.
        Expr::Call(c) => {
            crate::checker::call_name(a.value.as_ref()).is_some_and(|n| n == "list" || n == "dict")
                && c.arguments.keywords.is_empty()
                && match c.arguments.args.as_ref() {
                    [] => true,
                    [Expr::List(l)] => l.elts.is_empty(),
                    [Expr::Dict(d)] => d.items.is_empty(),
                    _ => false,
                }
        }
        _ => false,
    };
    let holds_modules =
        holds_modules(ck, a.value.as_ref(), &locals) || (empty && locals.contains(name.as_str()));
    let holds_params = !holds_modules
        && (holds_parameters(a.value.as_ref(), &local.param_lists, &HashSet::new())
            || (empty && local.param_lists.contains(name.as_str())));
    let (wrapper, what) = match (is_dict(a.value.as_ref()), holds_params) {
        (true, false) => ("nn.ModuleDict", "modules"),
        (false, false) => ("nn.ModuleList", "modules"),
        (true, true) => ("nn.ParameterDict", "parameters"),
        (false, true) => ("nn.ParameterList", "parameters"),
    };
    if !holds_modules && !holds_params {
        return;
    }
    let loc = ck.location(a);
    let value = &ck.source[ruff_text_size::Ranged::range(a.value.as_ref())
        .start()
        .to_usize()
        ..ruff_text_size::Ranged::range(a.value.as_ref())
            .end()
            .to_usize()];
    let f = RULE
        .finding(format!("`self.{attr}` holds {what} in a plain container: they are not registered, so no optimizer built from `model.parameters()` updates them."))
        .at(Some(loc))
        .fix(format!("self.{attr} = {wrapper}({value})"));
    match ck.nn_prefix.clone() {
        Some(nn) => {
            let wrapper = wrapper.replacen("nn", &nn, 1);
            let content = format!("{wrapper}({value})");
            ck.report_with_edit(f, ruff_text_size::Ranged::range(a.value.as_ref()), content);
        }
        None => ck.report(f),
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn flags_lists_and_dicts_of_modules() {
        let src = "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.heads = [nn.Linear(4, 2) for _ in range(3)]\n        self.experts = {'a': nn.Linear(2, 2)}\n        self.stages = tuple(nn.Conv1d(4, 4, 3) for _ in range(2))\n";
        assert_eq!(
            codes(src),
            vec![
                ("GS301".into(), 5),
                ("GS301".into(), 6),
                ("GS301".into(), 7)
            ]
        );
    }

    #[test]
    fn flags_tensors_meant_to_learn_and_factory_built_experts() {
        let src = "import torch\nimport torch.nn as nn\n\ndef mlp(d):\n    return nn.Sequential(nn.Linear(d, d), nn.SiLU())\n\nclass M(nn.Module):\n    def __init__(self, names):\n        super().__init__()\n        self.logit_scale = torch.tensor(2.6, requires_grad=True)\n        self.bias = torch.zeros(4).requires_grad_()\n        self.experts = {n: mlp(4) for n in names}\n";
        let found = crate::lint_source("t.py", src).unwrap();
        let lines: Vec<u32> = found
            .iter()
            .map(|f| f.location.as_ref().unwrap().line)
            .collect();
        assert_eq!(lines, vec![10, 11, 12]);
        assert_eq!(
            found[0].fix.as_deref(),
            Some("self.logit_scale = nn.Parameter(torch.tensor(2.6))")
        );
        assert_eq!(
            found[2].fix.as_deref(),
            Some("self.experts = nn.ModuleDict({n: mlp(4) for n in names})")
        );
    }

    #[test]
    fn a_plain_container_of_parameter_free_modules_loses_nothing() {
        // transformers' LXMERT keeps its losses in a dict (`from torch.nn import
        // CrossEntropyLoss, SmoothL1Loss`); activations and a parameter-free class of the file
        // in a list. A parameter-holding layer among them is flagged, and so is a list of
        // copies of a layer that is `nn.Identity()` only when a resolver returned nothing
        // (PyTorch Geometric's `BasicGNN`).
        let src = "import torch.nn as nn\nfrom torch.nn import CrossEntropyLoss, SmoothL1Loss\nclass Swish(nn.Module):\n    def forward(self, x):\n        return x * x.sigmoid()\nclass M(nn.Module):\n    def __init__(self, norm):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n        self.loss_fcts = {'l2': SmoothL1Loss(reduction='none'), 'ce': CrossEntropyLoss()}\n        self.acts = [nn.ReLU(), nn.Dropout(0.1), Swish()]\n        self.mixed = [nn.ReLU(), nn.Linear(4, 4)]\n        layer = resolve(norm)\n        if layer is None:\n            layer = nn.Identity()\n        self.norms = list()\n        for _ in range(2):\n            self.norms.append(copy.deepcopy(layer))\n";
        let found = crate::lint_source("t.py", src).unwrap();
        let lines: Vec<u32> = found
            .iter()
            .map(|f| f.location.as_ref().unwrap().line)
            .collect();
        assert_eq!(lines, vec![12, 16]);
    }

    #[test]
    fn flags_containers_built_in_steps() {
        // transformers' `list([Layer(i) for i ...])`, wav2vec2's concatenated conv layers
        // kept via `list(conv_layers)`, a list filled by `append` in a loop.
        let src = "import torch.nn as nn\nclass Block(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\nclass M(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.layer = list([Block() for i in range(n)])\n        conv_layers = [Block()] + [Block() for i in range(n)]\n        self.conv_layers = list(conv_layers)\n        blocks = []\n        for i in range(n):\n            layer = nn.Linear(4, 4)\n            blocks.append(layer)\n        self.blocks = blocks\n        self.towers = dict({'l': Block(), 'r': Block()})\n        self.layer = list()\n        self.layer.append(Block())\n        self.stages = []\n        self.stages.append(Block())\n        self.stages = nn.ModuleList(self.stages)\n        extra = nn.ModuleList([Block()])\n        extra.insert(0, Block())\n        self.extra = extra\n";
        let found = crate::lint_source("t.py", src).unwrap();
        let lines: Vec<u32> = found
            .iter()
            .map(|f| f.location.as_ref().unwrap().line)
            .collect();
        assert_eq!(lines, vec![9, 11, 16, 17, 18]);
        assert_eq!(
            found[3].fix.as_deref(),
            Some("self.towers = nn.ModuleDict(dict({'l': Block(), 'r': Block()}))")
        );
    }

    #[test]
    fn flags_parameters_and_tensors_that_learn_kept_in_plain_containers() {
        let src = "import torch\nimport torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, n, d):\n        super().__init__()\n        self.scales = [torch.ones(d, requires_grad=True) for _ in range(n)]\n        self.gains = {k: nn.Parameter(torch.ones(d)) for k in 'ab'}\n        self.biases = []\n        for i in range(n):\n            b = nn.Parameter(torch.zeros(d))\n            self.biases.append(b)\n        ws = []\n        ws += [nn.Parameter(torch.randn(d, d))]\n        self.ws = ws\n";
        let found = crate::lint_source("t.py", src).unwrap();
        let got: Vec<(u32, Option<&str>)> = found
            .iter()
            .map(|f| (f.location.as_ref().unwrap().line, f.fix.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (6, Some("self.scales = nn.ParameterList([torch.ones(d, requires_grad=True) for _ in range(n)])")),
                (7, Some("self.gains = nn.ParameterDict({k: nn.Parameter(torch.ones(d)) for k in 'ab'})")),
                (8, Some("self.biases = nn.ParameterList([])")),
                (14, Some("self.ws = nn.ParameterList(ws)")),
            ]
        );
        assert!(found[0]
            .message
            .contains("holds parameters in a plain container"));
    }

    #[test]
    fn parameter_containers_registered_or_holding_no_learning_tensor_are_fine() {
        let src = "import torch\nimport torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, n, d):\n        super().__init__()\n        self.scales = nn.ParameterList([nn.Parameter(torch.ones(d)) for _ in range(n)])\n        self.masks = [torch.ones(d) for _ in range(n)]\n        self.frozen = [torch.ones(d, requires_grad=False)]\n        self.ws = []\n        for i in range(n):\n            w = nn.Parameter(torch.zeros(d))\n            self.register_parameter(f'w{i}', w)\n            self.ws.append(w)\n        self.stats = [p.shape for p in self.parameters()]\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn layers_that_train_themselves_are_fine() {
        // pytorch/examples' forward-forward: each layer owns its optimizer.
        let src = "import torch.nn as nn\nfrom torch.optim import Adam\nclass Layer(nn.Linear):\n    def __init__(self, i, o):\n        super().__init__(i, o)\n        self.opt = Adam(self.parameters(), lr=0.03)\nclass Net(nn.Module):\n    def __init__(self, dims):\n        super().__init__()\n        self.layers = []\n        for d in range(len(dims) - 1):\n            self.layers = self.layers + [Layer(dims[d], dims[d + 1])]\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn a_class_on_an_unknown_base_whose_only_submodules_sit_in_a_list() {
        // transformers' Swin stage on `GradientCheckpointingLayer` (imported): its blocks in
        // `list([...])` are its submodules, so it is a module and they are unregistered.
        let src = "import torch.nn as nn\nfrom ...modeling_layers import GradientCheckpointingLayer\n\nclass Layer(GradientCheckpointingLayer):\n    def __init__(self, d):\n        super().__init__()\n        self.norm = nn.LayerNorm(d)\n\n    def forward(self, x):\n        return self.norm(x)\n\nclass Stage(GradientCheckpointingLayer):\n    def __init__(self, d, depth):\n        super().__init__()\n        self.blocks = list([Layer(d) for _ in range(depth)])\n\n    def forward(self, x):\n        for b in self.blocks:\n            x = b(x)\n        return x\n";
        assert_eq!(codes(src), vec![("GS301".into(), 15)]);
        // Registered: quiet.
        assert!(codes(&src.replace("list([", "nn.ModuleList([")).is_empty());
    }

    #[test]
    fn modules_registered_by_name_are_fine() {
        let src = "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.blocks = []\n        for i in range(n):\n            block = nn.Linear(4, 4)\n            self.blocks.append(block)\n            self.add_module(str(i), block)\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn modules_put_into_a_registered_tree_by_path_are_fine() {
        // x-transformers' test-time-training wrappers: set into `net` by path, indexed in a
        // plain dict.
        let body = "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, net, paths):\n        super().__init__()\n        self.net = net\n        self.wrappers = dict()\n        for path in paths:\n            wrapper = nn.Linear(4, 4)\n            REGISTER\n            self.wrappers[path] = wrapper\n";
        for register in [
            "set_module_by_path(net, path, wrapper)",
            "setattr(net, path, wrapper)",
            "net.set_submodule(path, wrapper)",
        ] {
            let src = body.replace("REGISTER", register);
            assert!(codes(&src).is_empty(), "{register}: {:?}", codes(&src));
        }
        let src = body.replace("REGISTER", "print(path)");
        assert_eq!(codes(&src), vec![("GS301".into(), 6)]);
    }

    #[test]
    fn module_lists_and_plain_data_are_fine() {
        let src = "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.scale = nn.Parameter(torch.ones(1, requires_grad=True))\n        self.mask = torch.zeros(4)\n        self.heads = nn.ModuleList([nn.Linear(4, 2)])\n        self.sizes = [4, 8]\n        self.acts = [nn.functional.relu]\n        layers = [nn.Linear(4, 4)]\n        self.body = nn.Sequential(*layers)\n        self.sizes2 = list(self.sizes)\nclass NotAModule:\n    def __init__(self):\n        self.layers = [nn.Linear(2, 2)]\n";
        assert!(codes(src).is_empty());
    }

    /// PEFT's `LoraLayer` mixin: the container is made in `__init__` and filled by another
    /// method (`update_layer`), and the mixin's `self` is the module that takes it in.
    #[test]
    fn a_container_a_mixins_other_method_fills() {
        let src = "import torch\nimport torch.nn as nn\n\n\nclass LoraLayer:\n    def __init__(self, base_layer: nn.Module, **kwargs) -> None:\n        self.base_layer = base_layer\n        self.lora_A = dict({})\n        self.lora_B = nn.ModuleDict({})\n        self.lora_dropout = nn.ModuleDict({})\n        self.scaling = {}\n\n    def update_layer(self, adapter_name, r):\n        self.lora_A[adapter_name] = nn.Linear(4, r, bias=False)\n        self.lora_B[adapter_name] = nn.Linear(r, 4, bias=False)\n        self.lora_dropout[adapter_name] = nn.Identity()\n\n\nclass Linear(nn.Module, LoraLayer):\n    def __init__(self, base_layer, adapter_name, r=8):\n        super().__init__()\n        LoraLayer.__init__(self, base_layer)\n        self.update_layer(adapter_name, r)\n        self.active_adapters = [adapter_name]\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        result = self.base_layer(x)\n        for active_adapter in self.active_adapters:\n            if active_adapter not in self.lora_A.keys():\n                continue\n            lora_A = self.lora_A[active_adapter]\n            lora_B = self.lora_B[active_adapter]\n            dropout = self.lora_dropout[active_adapter]\n            scaling = self.scaling[active_adapter]\n            x = x.to(lora_A.weight.dtype)\n            result = result + lora_B(lora_A(dropout(x))) * scaling\n\n        return result\n";
        assert_eq!(codes(src), vec![("GS301".into(), 8)]);
        let fine = src.replace("self.lora_A = dict({})", "self.lora_A = nn.ModuleDict({})");
        assert!(codes(&fine).is_empty());
    }
}
