//! Runtime findings cross-referenced with `gradsleuth lint`: a runtime finding that a lint
//! rule would have caught before running names the rule. Callers (the CLI, `_core`) apply
//! [`cross_reference`] to the analysis's findings; the analysis itself never lints.

use gradsleuth_model::Finding;

/// Lint findings of a source file, linted once per process and file version (a merge analyses
/// the same scripts once per rank).
fn lint_cached(file: &str) -> Vec<Finding> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Key = (String, Option<std::time::SystemTime>);
    static CACHE: OnceLock<Mutex<HashMap<Key, Vec<Finding>>>> = OnceLock::new();
    let key = (
        file.to_owned(),
        std::fs::metadata(file).and_then(|m| m.modified()).ok(),
    );
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return hit;
    }
    let found = std::fs::read_to_string(file)
        .ok()
        .and_then(|src| crate::lint_source(file, &src).ok())
        .unwrap_or_default();
    if let Ok(mut c) = cache.lock() {
        c.insert(key, found.clone());
    }
    found
}

/// A runtime finding that `gradsleuth lint` would have caught names the rule: the same
/// category (or the optimizer pair) at the same line of the same file, found by linting the
/// files the findings point to.
pub fn cross_reference(findings: &mut [Finding]) {
    use gradsleuth_model::Category as C;
    let same = |a: C, b: C| {
        a == b
            || matches!(
                (a, b),
                (
                    C::OptimizerMissing | C::OptimizerStale,
                    C::OptimizerMissing | C::OptimizerStale
                )
            )
    };
    let mut by_file: std::collections::HashMap<String, Vec<Finding>> = Default::default();
    for f in findings.iter_mut() {
        let Some(loc) = f.location.clone() else {
            continue;
        };
        if !loc.file.ends_with(".py") {
            continue;
        }
        let lint = by_file
            .entry(loc.file.clone())
            .or_insert_with(|| lint_cached(&loc.file));
        let hit = lint.iter().find(|l| {
            same(l.category, f.category)
                && l.location.as_ref().is_some_and(|ll| ll.line == loc.line)
        });
        if let Some(hit) = hit {
            let name = crate::rules::ALL
                .iter()
                .find(|r| r.code == hit.code)
                .map_or("", |r| r.name());
            f.related.push(gradsleuth_model::Related {
                location: hit.location.clone().unwrap_or(loc),
                message: format!(
                    "`gradsleuth lint` flags this before running: {} ({name})",
                    hit.code
                ),
            });
        }
    }
}
