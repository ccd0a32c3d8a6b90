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
                        if let Some(d) = crate::checker::dotted(&a.value) {
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

/// Was `attr` a trained submodule before (so the optimizer now holds stale parameters), or
/// is it new / a placeholder (so the optimizer misses the new ones)?
fn replaces_trained(ck: &Checker, attr: &str) -> bool {
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

pub fn check(
    ck: &mut Checker,
    body: &[Stmt],
    replacing: &[(String, usize, String)],
    held: &[Held],
    class: Option<&str>,
) {
    let mut stmts = Vec::new();
    flatten(body, &mut stmts);
    // (optimizer call range, its owners, still current)
    let mut optimizers: Vec<(TextRange, Vec<String>)> = Vec::new();
    // (optimizer, replacement, replaced attribute, the model it belongs to)
    let mut hits: Vec<(TextRange, TextRange, String, String)> = Vec::new();
    for s in stmts {
        let (targets, value): (Vec<&Expr>, Option<&Expr>) = match s {
            Stmt::Assign(a) => (a.targets.iter().collect(), Some(&a.value)),
            Stmt::Expr(e) => (Vec::new(), Some(&e.value)),
            _ => continue,
        };
        let Some(value) = value else { continue };
        if is_optimizer_call(value) {
            let mut owners = Vec::new();
            parameter_owners(value, &mut owners);
            let aliases: Vec<String> = owners
                .iter()
                .flat_map(|o| held_aliases(held, class, o))
                .collect();
            owners.extend(aliases);
            // A new optimizer over the same model supersedes the old one.
            optimizers.retain(|(_, o)| !o.iter().any(|x| owners.contains(x)));
            hits.retain(|(opt, _, _, _)| optimizers.iter().any(|(r, _)| r == opt));
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
            (true, _) => targets
                .into_iter()
                .filter_map(|t| crate::checker::dotted(t).map(|d| (d, t)))
                .collect(),
            (false, Some((arg, attr))) => crate::checker::dotted(arg)
                .map(|d| vec![(format!("{d}.{attr}"), value)])
                .unwrap_or_default(),
            _ => continue,
        };
        for (target, t) in targets {
            for (opt, owners) in &optimizers {
                let owned = owners.iter().find_map(|o| {
                    target
                        .strip_prefix(&format!("{o}."))
                        .map(|a| (o.clone(), a.to_owned()))
                });
                if let (Some((owner, attr)), false) = (owned, hits.iter().any(|h| h.0 == *opt)) {
                    hits.push((*opt, t.range(), attr, owner));
                }
            }
        }
    }
    for (opt, replaced, attr, owner) in hits {
        let loc = ck.location(&opt);
        let related = ck.location(&replaced);
        // One category per cause, as the runtime tells it: replacing a layer the model had
        // (the optimizer keeps stepping the old tensors) is `optimizer_stale`; adding a new one
        // is `optimizer_missing`. A model built by a class this file does not define (a
        // library's) is fine-tuned by replacing its head: nothing added to it would run.
        let stale = replaces_trained(ck, &attr) || built_elsewhere(ck, &owner);
        let mut f = RULE
            .finding(format!("The optimizer is built before `{attr}` is replaced: the new parameters get gradients but are never updated{}.", if stale { ", while the optimizer keeps updating the old ones" } else { "" }))
            .at(Some(loc))
            .fix("Build the optimizer after the model is final, or call `optimizer.add_param_group({\"params\": new_module.parameters()})`.");
        if stale {
            f.category = Category::OptimizerStale;
        }
        f.related.push(Related {
            location: related,
            message: "replaced here, after the optimizer took the old parameters".into(),
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
}
