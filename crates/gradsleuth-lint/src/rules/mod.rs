//! The lint rules, one file each: code, category, documentation, check, tests.

use gradsleuth_model::{Category, Finding, Severity};

pub mod backward_in_no_grad;
pub mod buffer_not_param;
pub mod data_attr;
pub mod frozen_then_optimized;
pub mod grad_clip_zero;
pub mod grad_without_create_graph;
pub mod hook_zeroes_grad;
pub mod loss_rewrap;
pub mod no_grad_forward;
pub mod non_diff_in_loss;
pub mod non_leaf_param;
pub mod recreated_module;
pub mod step_before_backward;
pub mod unregistered;
pub mod zero_grad_order;

/// A lint rule's identity and documentation.
pub struct Rule {
    pub code: &'static str,
    pub name: &'static str,
    pub category: Category,
    /// What it finds, why it breaks training, the fix, when it is legitimate.
    pub doc: &'static str,
}

impl Rule {
    pub fn finding(&self, message: impl Into<String>) -> Finding {
        Finding::new(self.code, self.category, Severity::Error, message)
    }
}

pub const ALL: &[&Rule] = &[
    &unregistered::RULE,
    &non_leaf_param::RULE,
    &buffer_not_param::RULE,
    &no_grad_forward::RULE,
    &recreated_module::RULE,
    &data_attr::RULE,
    &loss_rewrap::RULE,
    &grad_clip_zero::RULE,
    &zero_grad_order::RULE,
    &hook_zeroes_grad::RULE,
    &backward_in_no_grad::RULE,
    &grad_without_create_graph::RULE,
    &step_before_backward::RULE,
    &non_diff_in_loss::RULE,
    &frozen_then_optimized::RULE,
];

#[cfg(test)]
pub(crate) fn codes(src: &str) -> Vec<(String, u32)> {
    crate::lint_source("t.py", src)
        .unwrap()
        .into_iter()
        .map(|f| (f.code, f.location.map_or(0, |l| l.line)))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn codes_are_unique_and_documented() {
        let mut seen = std::collections::HashSet::new();
        for r in super::ALL {
            assert!(seen.insert(r.code), "{}", r.code);
            assert!(r.doc.len() > 80, "{}", r.code);
        }
    }
}
