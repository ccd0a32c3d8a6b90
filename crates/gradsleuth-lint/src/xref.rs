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

/// (runtime code, lint code): the runtime sees weights that no update changed (GS113, an info
/// line when a script may only compute gradients), lint sees the update assigned to a name
/// and dropped (GS329); the runtime sees gradients gone at the step after the script's write
/// (GS215), lint sees the loop that clears them between `backward()` and `step()` (GS330).
const CONFIRMS: &[(&str, &str)] = &[("GS113", "GS329"), ("GS215", "GS330")];

/// A runtime finding that `gradsleuth lint` would have caught names the rule: the same
/// category (or the optimizer pair) at the same line of the same file, found by linting the
/// files the findings point to.
///
/// Where the runtime sees a symptom that lint traces to its cause (the failing `backward()`
/// of a graph carried over from the last step is a related line of lint's finding at the
/// assignment that carried it), the cause becomes the finding's location and the runtime's
/// line its first related one.
///
/// Some runtime observations have a cause only the source shows ([`CONFIRMS`]): a lint finding
/// of the paired rule anywhere in the same file is that cause, and makes the observation an
/// error located there.
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
        let cause = hit.is_none().then(|| {
            lint.iter().find(|l| {
                let in_file = l.location.as_ref().is_some_and(|ll| ll.file == loc.file);
                let confirms = CONFIRMS.contains(&(f.code.as_str(), l.code.as_str()));
                in_file
                    && (confirms
                        || same(l.category, f.category)
                            && l.related.iter().any(|r| {
                                r.location.file == loc.file && r.location.line == loc.line
                            }))
            })
        });
        if let Some(Some(cause)) = &cause {
            if CONFIRMS.contains(&(f.code.as_str(), cause.code.as_str())) {
                f.severity = gradsleuth_model::Severity::Error;
            }
        }
        if let Some(cause) = cause.flatten() {
            let name = crate::rules::ALL
                .iter()
                .find(|r| r.code == cause.code)
                .map_or("", |r| r.name());
            f.location = cause.location.clone();
            f.related.insert(
                0,
                gradsleuth_model::Related {
                    location: loc,
                    message: format!(
                        "where it shows at run time; `gradsleuth lint` traces it to the line above: {} ({name})",
                        cause.code
                    ),
                },
            );
            continue;
        }
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

#[cfg(test)]
mod tests {
    use gradsleuth_model::{Category, Finding, Location, Severity};

    #[test]
    fn an_unchanged_weight_lint_explains_becomes_an_error_at_the_assignment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("train.py");
        std::fs::write(
            &file,
            "for x in data:\n    model(x).sum().backward()\n    with torch.no_grad():\n        for p in model.parameters():\n            p = p - 0.1 * p.grad\n",
        )
        .unwrap();
        let file = file.to_string_lossy().into_owned();
        let mut f = vec![
            Finding::new("GS113", Category::Other, Severity::Info, "nothing changed")
                .at(Some(Location::new(file.clone(), 2))),
        ];
        super::cross_reference(&mut f);
        assert_eq!(f[0].severity, Severity::Error);
        assert_eq!(f[0].location.as_ref().unwrap().line, 5, "{:?}", f[0]);
        assert_eq!(f[0].related[0].location.line, 2);
        assert!(f[0].related[0].message.contains("GS329"));
    }

    #[test]
    fn a_symptom_lint_traces_to_its_cause_is_located_at_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("train.py");
        std::fs::write(
            &file,
            "history = None\nfor x in data:\n    loss = model(x).sum()\n    if history is not None:\n        loss = loss + history\n    history = loss\n    loss.backward()\n",
        )
        .unwrap();
        let file = file.to_string_lossy().into_owned();
        let mut f = vec![Finding::new(
            "GS214",
            Category::StaleTensor,
            Severity::Error,
            "backward a second time",
        )
        .at(Some(Location::new(file.clone(), 7)))];
        super::cross_reference(&mut f);
        assert_eq!(f[0].location.as_ref().unwrap().line, 6, "{:?}", f[0]);
        assert_eq!(f[0].related[0].location.line, 7);
        assert!(f[0].related[0].message.contains("GS324"));
    }
}
