//! GS322: an optimizer built before a submodule or parameter of its model is replaced.

use gradsleuth_model::{Category, Related};
use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::{Ranged, TextRange};

use super::Rule;
use crate::checker::{call_name, Checker};

pub const RULE: Rule = Rule { code: "GS322" };

/// Receivers of `.parameters()`/`.named_parameters()` in an expression.
pub(crate) fn parameter_owners(e: &Expr, out: &mut Vec<String>) {
    use ruff_python_ast::visitor::{self, Visitor};
    struct V<'o>(&'o mut Vec<String>);
    impl<'a> Visitor<'a> for V<'_> {
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Call(c) = e {
                if let Expr::Attribute(a) = c.func.as_ref() {
                    if matches!(a.attr.id.as_str(), "parameters" | "named_parameters") {
                        if let Some(d) = crate::checker::module_path(&a.value) {
                            self.0.push(d);
                        }
                    }
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    V(out).visit_expr(e);
}

pub fn is_optimizer_call(e: &Expr) -> bool {
    call_name(e).is_some_and(|n| crate::flow::is_optimizer_ctor(&n))
}

/// A call of a function of the file that builds and returns an optimizer (`def
/// build_optimizer(model, lr): return torch.optim.AdamW(model.parameters(), lr=lr)`, or param
/// groups collected from `model.named_parameters()` first): the models whose parameters it
/// reads, its parameters replaced by what the call passes. None for any other expression.
pub(crate) fn factory_owners(ck: &Checker, e: &Expr) -> Option<Vec<String>> {
    use ruff_python_ast::visitor::{self, Visitor};
    let Expr::Call(c) = e else { return None };
    let Expr::Name(n) = c.func.as_ref() else {
        return None;
    };
    let f = ck.defs.get(n.id.as_str())?;
    let params = crate::flow::param_names(&f.parameters);
    // (A method of the same name, called through its object, binds `self` first.)
    if params
        .first()
        .is_some_and(|p| matches!(p.as_str(), "self" | "cls"))
    {
        return None;
    }
    // What it returns: an optimizer call, or a name it bound to one.
    struct Returns<'a> {
        built: Vec<String>,
        returns: Vec<&'a Expr>,
    }
    impl<'a> Visitor<'a> for Returns<'a> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            match s {
                Stmt::FunctionDef(_) | Stmt::ClassDef(_) => return,
                Stmt::Return(r) => self.returns.extend(r.value.as_deref()),
                Stmt::Assign(a) if is_optimizer_call(&a.value) => {
                    self.built
                        .extend(a.targets.iter().filter_map(crate::checker::dotted));
                }
                _ => {}
            }
            visitor::walk_stmt(self, s);
        }
    }
    let mut r = Returns {
        built: Vec::new(),
        returns: Vec::new(),
    };
    visitor::walk_body(&mut r, &f.body);
    let returns_optimizer = r.returns.iter().any(|v| {
        is_optimizer_call(v) || crate::checker::dotted(v).is_some_and(|d| r.built.contains(&d))
    });
    if !returns_optimizer {
        return None;
    }
    let mut inside = Vec::new();
    struct Owners<'o>(&'o mut Vec<String>);
    impl<'a> Visitor<'a> for Owners<'_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if !matches!(s, Stmt::FunctionDef(_) | Stmt::ClassDef(_)) {
                visitor::walk_stmt(self, s);
            }
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            parameter_owners(e, self.0);
        }
    }
    visitor::walk_body(&mut Owners(&mut inside), &f.body);
    let passed =
        |p: &str, i: usize| crate::checker::argument(c, p, i).and_then(crate::checker::module_path);
    let mut out = Vec::new();
    for o in inside {
        let (root, rest) = o
            .split_once('.')
            .map_or((o.as_str(), None), |(a, b)| (a, Some(b)));
        match params.iter().position(|p| p == root) {
            Some(i) => {
                if let Some(arg) = passed(root, i) {
                    out.push(rest.map_or(arg.clone(), |r| format!("{arg}.{r}")));
                }
            }
            None => out.push(o.clone()),
        }
    }
    out.dedup();
    Some(out)
}

/// Statements of a body in order, nested blocks flattened (not nested functions or classes).
pub(crate) fn flatten<'a>(body: &'a [Stmt], out: &mut Vec<&'a Stmt>) {
    for s in body {
        out.push(s);
        match s {
            Stmt::If(i) => {
                flatten(&i.body, out);
                for c in &i.elif_else_clauses {
                    flatten(&c.body, out);
                }
            }
            Stmt::For(f) => flatten(&f.body, out),
            Stmt::While(w) => flatten(&w.body, out),
            Stmt::With(w) => flatten(&w.body, out),
            Stmt::Try(t) => {
                flatten(&t.body, out);
                flatten(&t.finalbody, out);
            }
            _ => {}
        }
    }
}

/// Functions of the file that give one of their parameters a new submodule or parameter
/// (`def adapt(model, n): model.fc = nn.Linear(...)`): name -> index of that parameter.
pub fn replacing_functions(ck: &Checker, module: &[Stmt]) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for s in module {
        let Stmt::FunctionDef(f) = s else { continue };
        let params = crate::flow::param_names(&f.parameters);
        let mut stmts = Vec::new();
        flatten(&f.body, &mut stmts);
        for st in stmts {
            let Stmt::Assign(a) = st else { continue };
            let new_params = ck.constructs_module(&a.value)
                || call_name(&a.value).is_some_and(|n| n.ends_with("Parameter"));
            if !new_params {
                continue;
            }
            for t in &a.targets {
                if let Some((root, attr)) = crate::checker::dotted(t)
                    .and_then(|d| d.split_once('.').map(|(r, a)| (r.to_owned(), a.to_owned())))
                {
                    if let Some(i) = params.iter().position(|p| *p == root) {
                        out.push((f.name.id.to_string(), i, attr));
                    }
                }
            }
        }
    }
    out
}

/// A model handed to a holder's constructor and kept in an attribute: `lit = Lit(model)`
/// with `def __init__(self, model): self.model = model`. Inside `Lit`'s methods `self.model`
/// and the module's `model` are one object, and so are `lit.model` and `model`.
#[derive(Debug, Clone)]
pub struct Held {
    pub class: String,
    pub attr: String,
    /// The name handed to the constructor.
    pub name: String,
    /// The name the holder is bound to, if any.
    pub holder: Option<String>,
}

/// Every [`Held`] relation of the module: constructor calls of classes it defines whose
/// `__init__` stores a parameter in `self`.
pub fn held(module: &[Stmt]) -> Vec<Held> {
    use ruff_python_ast::visitor::{self, Visitor};
    // class -> (parameter position without `self`, parameter name, attribute it is stored in)
    let mut stores: Vec<(String, usize, String, String)> = Vec::new();
    for s in module {
        let Stmt::ClassDef(c) = s else { continue };
        for st in &c.body {
            let Stmt::FunctionDef(f) = st else { continue };
            if f.name.id.as_str() != "__init__" {
                continue;
            }
            let params: Vec<String> = crate::flow::param_names(&f.parameters)
                .into_iter()
                .skip(1)
                .collect();
            let mut body = Vec::new();
            flatten(&f.body, &mut body);
            for b in body {
                let Stmt::Assign(a) = b else { continue };
                let Expr::Name(value) = a.value.as_ref() else {
                    continue;
                };
                let Some(i) = params.iter().position(|p| p == value.id.as_str()) else {
                    continue;
                };
                for t in &a.targets {
                    if let Some(attr) = crate::checker::dotted(t)
                        .and_then(|d| d.strip_prefix("self.").map(str::to_owned))
                    {
                        stores.push((c.name.id.to_string(), i, params[i].clone(), attr));
                    }
                }
            }
        }
    }
    struct V<'s> {
        stores: &'s [(String, usize, String, String)],
        out: Vec<Held>,
    }
    impl V<'_> {
        fn construct(&mut self, e: &Expr, holder: Option<String>) {
            let Expr::Call(c) = e else { return };
            let Some(class) = call_name(e) else { return };
            for (cls, i, param, attr) in self.stores.iter().filter(|s| s.0 == class) {
                let arg = c.arguments.args.get(*i).or_else(|| {
                    c.arguments
                        .keywords
                        .iter()
                        .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == param))
                        .map(|k| &k.value)
                });
                if let Some(Expr::Name(n)) = arg {
                    self.out.push(Held {
                        class: cls.clone(),
                        attr: attr.clone(),
                        name: n.id.to_string(),
                        holder: holder.clone(),
                    });
                }
            }
        }
    }
    impl<'a> Visitor<'a> for V<'_> {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            if let Stmt::Assign(a) = s {
                let holder = match a.targets.as_slice() {
                    [Expr::Name(n)] => Some(n.id.to_string()),
                    _ => None,
                };
                self.construct(&a.value, holder);
            }
            visitor::walk_stmt(self, s);
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            // An unbound construction (`trainer.fit(Lit(model))`).
            if let Expr::Call(c) = e {
                for a in &c.arguments.args {
                    self.construct(a, None);
                }
            }
            visitor::walk_expr(self, e);
        }
    }
    if stores.is_empty() {
        return Vec::new();
    }
    let mut v = V {
        stores: &stores,
        out: Vec::new(),
    };
    for s in module {
        v.visit_stmt(s);
    }
    v.out
}

/// The names that are one object with `owner` or part of it through a [`Held`] relation,
/// seen from inside `class` (None at module level).
fn held_aliases(held: &[Held], class: Option<&str>, owner: &str) -> Vec<String> {
    held.iter()
        .filter(|h| {
            let inside = class == Some(h.class.as_str())
                && (owner == "self" || owner == format!("self.{}", h.attr));
            let outside = h
                .holder
                .as_deref()
                .is_some_and(|x| owner == x || owner == format!("{x}.{}", h.attr));
            inside || outside
        })
        .map(|h| h.name.clone())
        .collect()
}

/// A call of a replacing function: the argument whose submodules it replaces.
fn replaced_by_call<'e>(
    e: &'e Expr,
    replacing: &'e [(String, usize, String)],
) -> Option<(&'e Expr, &'e str)> {
    let Expr::Call(c) = e else { return None };
    let name = call_name(e)?;
    let (_, i, attr) = replacing.iter().find(|(n, _, _)| *n == name)?;
    Some((c.arguments.args.get(*i)?, attr))
}

/// What a finding calls the replaced part: its path below the optimizer's model, or the
/// whole path when the optimizer holds that part itself (`SGD(model.fc.parameters())`).
fn shown(below: &str, path: &str) -> String {
    if below.is_empty() || below.starts_with('[') {
        path.to_owned()
    } else {
        below.to_owned()
    }
}

/// Was `attr` a trained submodule before (so the optimizer now holds stale parameters), or
/// is it new / a placeholder (so the optimizer misses the new ones)? An index of a
/// container (`layers[1]`, `classifier[-1]`) is one that exists: assigning past the end raises.
fn replaces_trained(ck: &Checker, attr: &str) -> bool {
    if attr
        .strip_suffix(']')
        .and_then(|a| a.rsplit_once('['))
        .is_some_and(|(_, i)| i.trim_start_matches('-').parse::<u64>().is_ok())
    {
        return true;
    }
    let last = attr.rsplit('.').next().unwrap_or(attr);
    let needle = format!("self.{last} = ");
    ck.source.match_indices(&needle).any(|(i, _)| {
        let rest = &ck.source[i + needle.len()..];
        let value = rest.lines().next().unwrap_or("");
        !value.contains("Identity()") && !value.starts_with("None")
    })
}

/// Whether `owner` (`model`, `self.net`) is built by a call to a class or function this file
/// does not define (`torchvision.models.resnet18()`, `AutoModel.from_pretrained(...)`).
fn built_elsewhere(ck: &Checker, owner: &str) -> bool {
    let needle = format!("{owner} = ");
    let Some(i) = ck.source.find(&needle) else {
        return false;
    };
    let value = ck.source[i + needle.len()..].lines().next().unwrap_or("");
    let Some(callee) = value
        .split('(')
        .next()
        .filter(|c| value.contains('(') && !c.is_empty())
    else {
        return false;
    };
    let first = callee.trim().split('.').next().unwrap_or("");
    let last = callee.trim().rsplit('.').next().unwrap_or("");
    let defined = |name: &str| {
        ck.source.contains(&format!("class {name}("))
            || ck.source.contains(&format!("class {name}:"))
            || ck.source.contains(&format!("def {name}("))
    };
    !(defined(first) || defined(last))
}

/// An optimizer that holds the parameters a later statement replaced.
struct Hit {
    optimizer: TextRange,
    replacement: TextRange,
    /// The replaced part as the finding names it.
    attr: String,
    /// The model the optimizer reads.
    owner: String,
    path: String,
    /// Read from a list of parameters taken before the replacement.
    from_list: bool,
    /// The replacement read the part it replaces (so that part existed).
    existed: bool,
}

/// `value` builds a collection now (`list(...)`, a comprehension), rather than a generator
/// that reads the model when it is consumed.
fn materializes(value: &Expr) -> bool {
    match value {
        Expr::ListComp(_) | Expr::SetComp(_) | Expr::DictComp(_) => true,
        Expr::Call(c) => matches!(c.func.as_ref(), Expr::Name(n)
            if matches!(n.id.as_str(), "list" | "tuple" | "set" | "sorted" | "dict")),
        _ => false,
    }
}

/// A list of a model's parameters taken at one point of the body (`params =
/// list(model.parameters())`, `head = [p for n, p in named if ...]`): an optimizer built
/// from it later holds the parameters as they were then.
struct Snapshot {
    owners: Vec<String>,
    /// Position of the statement that took it, among the body's statements.
    at: usize,
}

pub fn check(
    ck: &mut Checker,
    body: &[Stmt],
    replacing: &[(String, usize, String)],
    held: &[Held],
    class: Option<&str>,
) {
    let mut stmts = Vec::new();
    flatten(body, &mut stmts);
    // (optimizer call range, its owners)
    let mut optimizers: Vec<(TextRange, Vec<String>)> = Vec::new();
    let mut hits: Vec<Hit> = Vec::new();
    let mut snapshots: std::collections::HashMap<String, Snapshot> = Default::default();
    // Every replacement so far: (position, range, full path, the old part was read).
    let mut replaced: Vec<(usize, TextRange, String, bool)> = Vec::new();
    for (at, s) in stmts.into_iter().enumerate() {
        let (targets, value): (Vec<&Expr>, Option<&Expr>) = match s {
            Stmt::Assign(a) => (a.targets.iter().collect(), Some(&a.value)),
            Stmt::AnnAssign(a) => (vec![a.target.as_ref()], a.value.as_deref()),
            Stmt::Expr(e) => (Vec::new(), Some(&e.value)),
            _ => continue,
        };
        let Some(value) = value else { continue };
        // The models whose parameters `value` reads, directly or through a snapshot, and the
        // earliest point those parameters were read.
        let mut owners = Vec::new();
        parameter_owners(value, &mut owners);
        let factory = factory_owners(ck, value);
        owners.extend(factory.iter().flatten().cloned());
        let mut taken = at;
        let mut reads_snapshot = false;
        for n in crate::checker::module_paths(value) {
            if let Some(snap) = snapshots.get(&n) {
                owners.extend(snap.owners.iter().cloned());
                taken = taken.min(snap.at);
                reads_snapshot = true;
            }
        }
        if is_optimizer_call(value) || factory.is_some() {
            let aliases: Vec<String> = owners
                .iter()
                .flat_map(|o| held_aliases(held, class, o))
                .collect();
            owners.extend(aliases);
            // A new optimizer over the same model supersedes the old one; one over a replaced
            // part (`SGD(model.fc.parameters())` after `model.fc = ...`) holds the new
            // parameters, unless it reads them from a list taken before.
            optimizers.retain(|(_, o)| !o.iter().any(|x| owners.contains(x)));
            hits.retain(|h| {
                optimizers.iter().any(|(r, _)| *r == h.optimizer)
                    && !(taken == at
                        && owners
                            .iter()
                            .any(|o| crate::checker::part_of(&h.path, o).is_some()))
            });
            // Built from a list taken before a replacement: the old parameters.
            for (_, range, path, existed) in replaced.iter().filter(|r| r.0 > taken) {
                let owned = owners.iter().find_map(|o| {
                    crate::checker::part_of(path, o).map(|a| (o.clone(), shown(a, path)))
                });
                if let (Some((owner, attr)), false) =
                    (owned, hits.iter().any(|h| h.optimizer == value.range()))
                {
                    hits.push(Hit {
                        optimizer: value.range(),
                        replacement: *range,
                        attr,
                        owner,
                        path: path.clone(),
                        from_list: true,
                        existed: *existed,
                    });
                }
            }
            if !owners.is_empty() {
                optimizers.push((value.range(), owners));
            }
            continue;
        }
        if call_name(value).is_some_and(|n| n.ends_with("add_param_group")) {
            optimizers.clear();
            hits.clear();
            continue;
        }
        let new_params = ck.constructs_module(value)
            || call_name(value).is_some_and(|n| n.ends_with("Parameter"));
        // `adapt(model, 3)` replaces `model.<something>`.
        let via_call = replaced_by_call(value, replacing);
        let targets: Vec<(String, &Expr)> = match (new_params, via_call) {
            // A bare name rebound (`model = DDP(model)`) is not a part replaced.
            (true, _) => targets
                .into_iter()
                .filter(|t| !matches!(t, Expr::Name(_)))
                .filter_map(|t| crate::checker::module_path(t).map(|d| (d, t)))
                .collect(),
            (false, Some((arg, attr))) => crate::checker::module_path(arg)
                .map(|d| vec![(format!("{d}.{attr}"), value)])
                .unwrap_or_default(),
            _ => {
                // A name bound to a list of parameters keeps the point it was taken. A bare
                // `model.parameters()` is a generator: it reads the model when consumed.
                let list =
                    materializes(value) || (reads_snapshot && !matches!(value, Expr::Generator(_)));
                for t in &targets {
                    if let Expr::Name(n) = t {
                        if owners.is_empty() || !list {
                            snapshots.remove(n.id.as_str());
                        } else {
                            snapshots.insert(
                                n.id.to_string(),
                                Snapshot {
                                    owners: owners.clone(),
                                    at: taken,
                                },
                            );
                        }
                    }
                }
                continue;
            }
        };
        for (target, t) in targets {
            // `model.fc = nn.Linear(model.fc.in_features, 3)` read the part it replaces.
            let existed = crate::checker::module_paths(value).contains(&target);
            replaced.push((at, t.range(), target.clone(), existed));
            for (opt, owners) in &optimizers {
                let owned = owners.iter().find_map(|o| {
                    crate::checker::part_of(&target, o).map(|a| (o.clone(), shown(a, &target)))
                });
                if let (Some((owner, attr)), false) =
                    (owned, hits.iter().any(|h| h.optimizer == *opt))
                {
                    hits.push(Hit {
                        optimizer: *opt,
                        replacement: t.range(),
                        attr,
                        owner,
                        path: target.clone(),
                        from_list: false,
                        existed,
                    });
                }
            }
        }
    }
    for Hit {
        optimizer: opt,
        replacement: replaced,
        attr,
        owner,
        from_list,
        existed,
        ..
    } in hits
    {
        let loc = ck.location(&opt);
        let related = ck.location(&replaced);
        // One category per cause, as the runtime tells it: replacing a layer the model had
        // (the optimizer keeps stepping the old tensors) is `optimizer_stale`; adding a new one
        // is `optimizer_missing`. A model built by a class this file does not define (a
        // library's) is fine-tuned by replacing its head: nothing added to it would run.
        let stale = existed || replaces_trained(ck, &attr) || built_elsewhere(ck, &owner);
        let mut f = RULE
            .finding(format!("The optimizer is built {} `{attr}` is replaced: the new parameters get gradients but are never updated{}.", if from_list { "from parameters listed before" } else { "before" }, if stale { ", while the optimizer keeps updating the old ones" } else { "" }))
            .at(Some(loc))
            .fix("Build the optimizer after the model is final, or call `optimizer.add_param_group({\"params\": new_module.parameters()})`.");
        if stale {
            f.category = Category::OptimizerStale;
        }
        f.related.push(Related {
            location: related,
            message: if from_list {
                "replaced here, after the list took the old parameters"
            } else {
                "replaced here, after the optimizer took the old parameters"
            }
            .into(),
        });
        ck.report(f);
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes;

    #[test]
    fn a_library_models_head_replaced_after_the_optimizer_is_stale_as_at_run_time() {
        use gradsleuth_model::Category;
        let src = "import torchvision\nmodel = torchvision.models.resnet18(num_classes=10)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel.fc = nn.Linear(512, 3)\n";
        let f = crate::lint_source("t.py", src).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].category, Category::OptimizerStale);
        // Added to a model this file defines: missing.
        let src = "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 2)\nmodel = Net()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel.adapter = nn.Linear(2, 2)\n";
        let f = crate::lint_source("t.py", src).unwrap();
        assert_eq!(f[0].category, Category::OptimizerMissing);
    }

    #[test]
    fn flags_adapter_added_after_optimizer() {
        let src = "class Adapter(nn.Module):\n    pass\n\ndef setup(lr=1e-3):\n    model = Regressor()\n    opt = torch.optim.Adam(model.parameters(), lr=lr)\n    model.adapter = Adapter(16)\n    return model, opt\n";
        assert_eq!(codes(src), vec![("GS322".into(), 6)]);
    }

    #[test]
    fn an_optimizer_built_by_a_factory_of_the_file() {
        // `build_optimizer(model)` returns an optimizer over what it is passed (param groups
        // collected first, or one call); the head replaced after it is not in it.
        let src = "import torch\nfrom torchvision.models import resnet18\n\ndef build_optimizer(net, lr, wd=0.01):\n    decay = [p for n, p in net.named_parameters() if p.dim() >= 2]\n    rest = [p for n, p in net.named_parameters() if p.dim() < 2]\n    opt = torch.optim.AdamW([{\"params\": decay, \"weight_decay\": wd}, {\"params\": rest}], lr=lr)\n    return opt\n\nmodel = resnet18()\noptimizer = build_optimizer(model, 1e-3)\nmodel.fc = torch.nn.Linear(512, 3)\n";
        assert_eq!(codes(src), vec![("GS322".into(), 11)]);
        let one_line = "import torch\nfrom torchvision.models import resnet18\n\ndef build_optimizer(net):\n    return torch.optim.SGD(net.parameters(), lr=0.1)\n\nmodel = resnet18()\noptimizer = build_optimizer(net=model)\nmodel.fc = torch.nn.Linear(512, 3)\n";
        assert_eq!(codes(one_line), vec![("GS322".into(), 8)]);
        // Built after the replacement, over another model, or a function returning no optimizer.
        let after = src.replace(
            "optimizer = build_optimizer(model, 1e-3)\nmodel.fc = torch.nn.Linear(512, 3)\n",
            "model.fc = torch.nn.Linear(512, 3)\noptimizer = build_optimizer(model, 1e-3)\n",
        );
        assert!(codes(&after).is_empty());
        let other = src.replace(
            "build_optimizer(model, 1e-3)",
            "build_optimizer(teacher, 1e-3)",
        );
        assert!(codes(&other).is_empty());
        let not_one = src.replace("    return opt\n", "    return decay\n");
        assert!(codes(&not_one).is_empty());
    }

    #[test]
    fn a_model_kept_by_a_holder_is_the_same_object_under_both_names() {
        // A LightningModule keeps the script's model; `configure_optimizers` builds the
        // optimizer over `self.model`, then the script's `model` gets a new head.
        let src = "import lightning as L\nfrom torchvision.models import resnet18\n\nclass Lit(L.LightningModule):\n    def __init__(self, net, lr=1e-3):\n        super().__init__()\n        self.model = net\n\n    def configure_optimizers(self):\n        optimizer = torch.optim.AdamW(self.model.parameters())\n        model.fc = nn.Linear(512, 3)\n        return optimizer\n\nmodel = resnet18()\nlit = Lit(model)\n";
        assert_eq!(codes(src), vec![("GS322".into(), 10)]);
        // Passed by keyword, unbound (`fit(Lit(net=model))`), or through the holder's name.
        let kw = src.replace("lit = Lit(model)", "trainer.fit(Lit(net=model))");
        assert_eq!(codes(&kw), vec![("GS322".into(), 10)]);
        let outside = "class Wrap(nn.Module):\n    def __init__(self, inner):\n        super().__init__()\n        self.inner = inner\n\nnet = resnet18()\nwrapped = Wrap(net)\nopt = torch.optim.SGD(wrapped.parameters(), lr=0.1)\nnet.fc = nn.Linear(512, 3)\n";
        assert_eq!(codes(outside), vec![("GS322".into(), 8)]);
        // Another model, not the one the holder keeps: fine.
        let other = src.replace(
            "        model.fc = nn.Linear(512, 3)\n",
            "        other.fc = nn.Linear(512, 3)\n",
        );
        assert!(codes(&other).is_empty());
    }

    #[test]
    fn replacing_before_or_rebuilding_is_fine() {
        let src = "model = torchvision.models.resnet18()\nmodel.fc = nn.Linear(512, 10)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel.head = nn.Linear(10, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel.to('cpu')\n";
        assert!(codes(src).is_empty());
        let src = "def adapt(model, n):\n    model.fc = nn.Linear(16, n)\n    return model\n\ndef unrelated(model):\n    model.eval()\n\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nunrelated(model)\nmodel = adapt(model, 3)\n";
        assert_eq!(codes(src), vec![("GS322".into(), 8)]);
        let src = "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel.extra = nn.Linear(4, 4)\nopt.add_param_group({'params': model.extra.parameters()})\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn a_part_reached_by_index_or_key_is_replaced_too() {
        use gradsleuth_model::Category;
        // torchvision's fine-tuning idiom, a layer of a stack, a `ModuleDict` entry.
        for target in [
            "model.classifier[-1]",
            "model.layers[1].mlp.fc2",
            "model.features[3][0].block[5]",
            "model.heads[\"cls\"]",
        ] {
            let src = format!("import torchvision\nmodel = torchvision.models.vgg11()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n{target} = nn.Linear(4096, 3)\n");
            let f = crate::lint_source("t.py", &src).unwrap();
            assert_eq!(f.len(), 1, "{target}: {f:?}");
            assert_eq!(f[0].location.as_ref().unwrap().line, 3);
            assert_eq!(f[0].category, Category::OptimizerStale, "{target}");
        }
        // An index of a stack of this file's model existed before: stale, not missing.
        let src = "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])\nmodel = Net()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel.blocks[1] = nn.Linear(4, 4)\n";
        let f = crate::lint_source("t.py", src).unwrap();
        assert_eq!(f[0].category, Category::OptimizerStale);
        // A layer of a library class inside this file's model, read by its replacement: it existed.
        let src = "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), 2)\nmodel = Net()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel.encoder.layers[1].linear2 = nn.Linear(model.encoder.layers[1].linear2.in_features, 8)\n";
        let f = crate::lint_source("t.py", src).unwrap();
        assert_eq!(f[0].category, Category::OptimizerStale);
        // A computed index is not read; rebinding the model's own name is not a part replaced.
        let src = "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel.layers[i] = nn.Linear(4, 4)\nmodel = DDP(model)\n";
        assert!(codes(src).is_empty());
    }

    #[test]
    fn a_list_of_parameters_taken_before_the_replacement_holds_the_old_ones() {
        // The optimizer reads a list made from the model's parameters, before or after the
        // replacement: what counts is when the list was taken.
        let src = "named = list(model.named_parameters())\nhead = [p for n, p in named if n.startswith('fc')]\nbody = [p for n, p in named if not n.startswith('fc')]\nopt = torch.optim.AdamW(body, lr=1e-4)\nmodel.fc = nn.Linear(512, 3)\nhead_opt = torch.optim.AdamW(head, lr=1e-3)\n";
        // The second optimizer over the model supersedes the first, as a rebuilt one does.
        assert_eq!(codes(src), vec![("GS322".into(), 6)]);
        let src = "params = list(model.fc.parameters())\nmodel.fc = nn.Linear(512, 3)\nopt = torch.optim.SGD(params, lr=0.1)\n";
        assert_eq!(codes(src), vec![("GS322".into(), 3)]);
        // Taken after the replacement, or the replaced part given to an optimizer of its own
        // afterwards: fine.
        let src = "model.fc = nn.Linear(512, 3)\nparams = list(model.parameters())\nopt = torch.optim.SGD(params, lr=0.1)\n";
        assert!(codes(src).is_empty());
        let src = "opt = torch.optim.SGD(model.fc.parameters(), lr=0.1)\nmodel.fc = nn.Linear(512, 3)\nopt = torch.optim.SGD(model.fc.parameters(), lr=0.1)\n";
        assert!(codes(src).is_empty());
        // A generator reads the model when the optimizer consumes it.
        let src = "params = model.parameters()\nmodel.fc = nn.Linear(512, 3)\nopt = torch.optim.SGD(params, lr=0.1)\n";
        assert!(codes(src).is_empty());
        // A list rebound to something else is no longer a snapshot.
        let src = "params = list(model.parameters())\nmodel.fc = nn.Linear(512, 3)\nparams = list(model.parameters())\nopt = torch.optim.SGD(params, lr=0.1)\n";
        assert!(codes(src).is_empty());
    }
}
