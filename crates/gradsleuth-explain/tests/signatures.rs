//! Every signature against a positive text and a near-miss negative (tests/cases.toml).

use std::collections::{BTreeMap, BTreeSet};

use gradsleuth_explain::{explain_text, Kb};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    id: String,
    positive: String,
    negative: String,
    #[serde(default)]
    fields: BTreeMap<String, String>,
    provenance: String,
}

#[derive(Deserialize)]
struct Cases {
    case: Vec<Case>,
}

fn cases() -> Vec<Case> {
    toml::from_str::<Cases>(include_str!("cases.toml"))
        .expect("cases.toml parses")
        .case
}

fn ids(text: &str) -> Vec<String> {
    explain_text(text)
        .findings
        .iter()
        .filter_map(|f| f.explanation.as_ref().map(|e| e.signature.clone()))
        .collect()
}

#[test]
fn every_signature_has_a_case() {
    let have: BTreeSet<String> = cases().into_iter().map(|c| c.id).collect();
    for s in &Kb::builtin().signatures {
        assert!(have.contains(&s.id), "no test case for {}", s.id);
    }
}

#[test]
fn positives_are_recognised_with_their_fields() {
    for c in cases() {
        assert!(!c.provenance.is_empty());
        let out = explain_text(&c.positive);
        let hit = out
            .findings
            .iter()
            .find(|f| f.explanation.as_ref().is_some_and(|e| e.signature == c.id));
        let hit =
            hit.unwrap_or_else(|| panic!("{}: not recognised; got {:?}", c.id, ids(&c.positive)));
        let e = hit.explanation.as_ref().unwrap();
        for (k, v) in &c.fields {
            assert_eq!(e.fields.get(k), Some(v), "{}: field {k}", c.id);
        }
        assert!(
            !e.meaning.contains("{"),
            "{}: unfilled placeholder in {:?}",
            c.id,
            e.meaning
        );
    }
}

#[test]
fn near_misses_are_not_recognised_as_that_signature() {
    for c in cases() {
        assert!(
            !ids(&c.negative).contains(&c.id),
            "{}: matched its near miss {:?}",
            c.id,
            c.negative
        );
    }
}
