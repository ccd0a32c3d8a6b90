//! One walk over a module's AST, keeping the scope rules need, dispatching to every rule.

use std::collections::HashSet;

use gradsleuth_model::{Finding, Location};
use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::Ranged;

use crate::rules;

/// What a rule may ask about where it is.
pub struct Checker<'a> {
    pub path: String,
    pub source: &'a str,
    line_starts: Vec<usize>,
    pub findings: Vec<Finding>,
    /// Names of classes in this file that subclass `nn.Module` (directly or not).
    module_classes: HashSet<String>,
    /// Enclosing classes: (name, is an nn.Module subclass).
    classes: Vec<(String, bool)>,
    /// Enclosing function names.
    functions: Vec<String>,
}

/// `a.b.c` for a chain of names and attributes; None for anything else.
pub fn dotted(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Name(n) => Some(n.id.to_string()),
        Expr::Attribute(a) => Some(format!("{}.{}", dotted(&a.value)?, a.attr.id)),
        _ => None,
    }
}

/// The called name of a call, e.g. `torch.tensor`, `self.register_buffer`.
pub fn call_name(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Call(c) => dotted(&c.func),
        _ => None,
    }
}

impl<'a> Checker<'a> {
    pub fn new(path: &str, source: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(source.match_indices('\n').map(|(i, _)| i + 1));
        Checker {
            path: path.to_owned(),
            source,
            line_starts,
            findings: Vec::new(),
            module_classes: HashSet::new(),
            classes: Vec::new(),
            functions: Vec::new(),
        }
    }

    pub fn check_module(&mut self, module: &'a ruff_python_ast::ModModule) {
        // Module subclasses first, so a class used before its definition is known.
        for _ in 0..3 {
            for stmt in &module.body {
                if let Stmt::ClassDef(c) = stmt {
                    let is_module = c.arguments.as_ref().is_some_and(|args| {
                        args.args.iter().any(|b| {
                            dotted(b).is_some_and(|n| {
                                n == "Module"
                                    || n.ends_with("nn.Module")
                                    || self.module_classes.contains(&n)
                            })
                        })
                    });
                    if is_module {
                        self.module_classes.insert(c.name.id.to_string());
                    }
                }
            }
        }
        rules::grad_without_create_graph::check(self, &module.body);
        rules::frozen_then_optimized::check(self, &module.body);
        self.visit_body(&module.body);
    }

    /// A location for a node: 1-based line and column (in characters), with the snippet.
    pub fn location(&self, node: &impl Ranged) -> Location {
        let start = node.range().start().to_usize();
        let end = node.range().end().to_usize();
        let line_idx = self
            .line_starts
            .partition_point(|&s| s <= start)
            .saturating_sub(1);
        let line_start = self.line_starts[line_idx];
        let line_end = self
            .line_starts
            .get(line_idx + 1)
            .map_or(self.source.len(), |e| e - 1);
        let text = &self.source[line_start..line_end.max(line_start)];
        let col = self.source[line_start..start].chars().count() as u32 + 1;
        let mut loc = Location::new(self.path.clone(), line_idx as u32 + 1);
        loc.column = Some(col);
        let end_idx = self
            .line_starts
            .partition_point(|&s| s <= end)
            .saturating_sub(1);
        loc.end_line = Some(end_idx as u32 + 1);
        loc.end_column =
            Some(self.source[self.line_starts[end_idx]..end].chars().count() as u32 + 1);
        loc.snippet = Some(text.trim_end().to_owned());
        loc.function = self.functions.last().cloned();
        loc
    }

    pub fn report(&mut self, finding: Finding) {
        let mut f = finding;
        f.id = String::new();
        self.findings.push(f);
    }

    /// Inside a class that subclasses `nn.Module`.
    pub fn in_module_class(&self) -> bool {
        self.classes.last().is_some_and(|(_, m)| *m)
    }

    /// Inside `forward` of an `nn.Module` subclass (directly, or in a nested function).
    pub fn in_forward(&self) -> bool {
        self.in_module_class() && self.functions.iter().any(|f| f == "forward")
    }

    /// Is this a call constructing a module (`nn.Linear(...)`, `torch.nn.Conv2d(...)`, or a
    /// Module subclass of this file)?
    pub fn constructs_module(&self, expr: &Expr) -> bool {
        let Some(name) = call_name(expr) else {
            return false;
        };
        let last = name.rsplit('.').next().unwrap_or(&name);
        let nn = (name.starts_with("nn.") || name.starts_with("torch.nn."))
            && last.chars().next().is_some_and(char::is_uppercase);
        let functional = name.contains(".functional.")
            || name.starts_with("nn.init")
            || name.starts_with("nn.utils");
        (nn && !functional && last != "Parameter" && !last.ends_with("Error"))
            || self.module_classes.contains(&name)
    }
}

impl<'a> Visitor<'a> for Checker<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::ClassDef(c) => {
                let is_module = self.module_classes.contains(c.name.id.as_str());
                self.classes.push((c.name.id.to_string(), is_module));
                visitor::walk_stmt(self, stmt);
                self.classes.pop();
                return;
            }
            Stmt::FunctionDef(f) => {
                rules::no_grad_forward::check(self, f);
                self.functions.push(f.name.id.to_string());
                rules::zero_grad_order::check(self, &f.body);
                rules::step_before_backward::check(self, &f.body);
                rules::grad_without_create_graph::check(self, &f.body);
                rules::frozen_then_optimized::check(self, &f.body);
                visitor::walk_stmt(self, stmt);
                self.functions.pop();
                return;
            }
            Stmt::For(f) => {
                rules::zero_grad_order::check(self, &f.body);
                rules::step_before_backward::check(self, &f.body);
            }
            Stmt::While(w) => {
                rules::zero_grad_order::check(self, &w.body);
                rules::step_before_backward::check(self, &w.body);
            }
            Stmt::With(w) => rules::backward_in_no_grad::check(self, w),
            Stmt::Assign(a) => {
                rules::unregistered::check(self, a);
                rules::non_leaf_param::check(self, a);
                rules::non_diff_in_loss::check(self, stmt);
            }
            _ => {}
        }
        visitor::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Call(_) => {
                rules::recreated_module::check(self, expr);
                rules::buffer_not_param::check(self, expr);
                rules::loss_rewrap::check(self, expr);
                rules::grad_clip_zero::check(self, expr);
                rules::hook_zeroes_grad::check(self, expr);
            }
            Expr::Attribute(_) => rules::data_attr::check(self, expr),
            _ => {}
        }
        visitor::walk_expr(self, expr);
    }
}
