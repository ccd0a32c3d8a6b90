//! The rule registry: one entry per pitfall, shared by every part of gradsleuth that reports
//! it (a runtime check in `gradsleuth-analysis`, a lint rule in `gradsleuth-lint`, the merge
//! of distributed runs, `watch`).
//!
//! The entries are data (`src/pitfalls.toml`, compiled in): for each pitfall its category, a
//! title and its documentation in fixed sections (what it finds, why it breaks training, an
//! example, the fix, when it is legitimate), and its codes, each with the name of its check
//! or rule, where it is found ([`Surface`]) and its line in the tables. A [`Finding`] is built
//! from its code ([`Rule::finding`]), so a code's category is written once. `gradsleuth lint
//! --list-rules`, SARIF's rule descriptions and the tables in README.md and docs/lint.md are
//! generated from here ([`markdown_table`]); this crate's tests hold the tables in sync.

use std::sync::OnceLock;

use gradsleuth_model::{Category, Finding, Severity};
use serde::Deserialize;

/// Where a code is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// `gradsleuth run`: the first observed steps.
    Run,
    /// `--watch`: the whole-run monitor.
    Watch,
    /// The merge of a distributed run's ranks.
    Merge,
    /// `gradsleuth lint`: static.
    Lint,
}

/// One pitfall: a way a parameter silently stops learning (or a fact worth one info line).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pitfall {
    pub name: String,
    pub category: Category,
    pub title: String,
    /// What it finds.
    pub what: String,
    /// Why it breaks training.
    pub why: String,
    pub example: String,
    pub fix: String,
    /// When the same code is right (and what is not reported).
    pub legitimate: String,
    pub codes: Vec<Code>,
}

/// A code of a pitfall: one check or rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Code {
    pub code: String,
    /// The check's or rule's name (`detach-cuts-module`).
    pub name: String,
    pub surface: Surface,
    /// Its category when not the pitfall's.
    #[serde(default)]
    pub category: Option<Category>,
    /// The category column's text when it is not one category.
    #[serde(default)]
    pub shown: Option<String>,
    /// Its line in the tables.
    pub finds: String,
}

#[derive(Deserialize)]
struct File {
    pitfall: Vec<Pitfall>,
}

/// Every pitfall, in the registry's order.
pub fn pitfalls() -> &'static [Pitfall] {
    static ALL: OnceLock<Vec<Pitfall>> = OnceLock::new();
    ALL.get_or_init(|| {
        toml::from_str::<File>(include_str!("pitfalls.toml"))
            .map(|f| f.pitfall)
            .unwrap_or_else(|e| {
                panic!("src/pitfalls.toml is invalid (the crate's tests say where): {e}")
            })
    })
}

/// A code with its pitfall.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub pitfall: &'static Pitfall,
    pub code: &'static Code,
}

impl Rule {
    pub fn code(&self) -> &'static str {
        &self.code.code
    }

    pub fn name(&self) -> &'static str {
        &self.code.name
    }

    pub fn category(&self) -> Category {
        self.code.category.unwrap_or(self.pitfall.category)
    }

    pub fn surface(&self) -> Surface {
        self.code.surface
    }

    /// A finding of this code.
    pub fn finding(&self, severity: Severity, message: impl Into<String>) -> Finding {
        Finding::new(self.code(), self.category(), severity, message)
    }

    /// The documentation, section by section, as plain text.
    pub fn doc(&self) -> String {
        let p = self.pitfall;
        format!(
            "{}\n\nWhat it finds: {}\n\nWhy it breaks training: {}\n\nExample:\n{}\n\nFix: {}\n\nWhen it is legitimate: {}",
            p.title,
            p.what,
            p.why,
            indent(&p.example),
            p.fix,
            p.legitimate
        )
    }

    /// The documentation as Markdown (SARIF's `help.markdown`).
    pub fn doc_markdown(&self) -> String {
        let p = self.pitfall;
        format!(
            "**{}**\n\n**What it finds.** {}\n\n**Why it breaks training.** {}\n\n**Example.**\n\n```python\n{}\n```\n\n**Fix.** {}\n\n**When it is legitimate.** {}",
            p.title, p.what, p.why, p.example, p.fix, p.legitimate
        )
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every code, sorted by code.
pub fn rules() -> Vec<Rule> {
    let mut out: Vec<Rule> = pitfalls()
        .iter()
        .flat_map(|p| p.codes.iter().map(move |code| Rule { pitfall: p, code }))
        .collect();
    out.sort_by(|a, b| a.code().cmp(b.code()));
    out
}

/// The rule with this code.
pub fn rule(code: &str) -> Option<Rule> {
    pitfalls().iter().find_map(|p| {
        p.codes.iter().find(|c| c.code == code).map(|c| Rule {
            pitfall: p,
            code: c,
        })
    })
}

/// The rule with this code, for code that names its own (held by tests: every check's and
/// rule's code is registered).
pub fn registered(code: &str) -> Rule {
    rule(code).unwrap_or_else(|| panic!("{code} is not in the rule registry"))
}

/// The Markdown table of the codes found on `surfaces`: `| code | category | finds |`, with
/// a `name` column when `with_name`.
pub fn markdown_table(surfaces: &[Surface], with_name: bool) -> String {
    let mut out = String::new();
    if with_name {
        out.push_str("| code | name | category | finds |\n|---|---|---|---|\n");
    } else {
        out.push_str("| code | category | finds |\n| --- | --- | --- |\n");
    }
    for r in rules()
        .into_iter()
        .filter(|r| surfaces.contains(&r.surface()))
    {
        let category = r
            .code
            .shown
            .clone()
            .unwrap_or_else(|| r.category().as_str());
        if with_name {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                r.code(),
                r.name(),
                category,
                r.code.finds
            ));
        } else {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                r.code(),
                category,
                r.code.finds
            ));
        }
    }
    out
}

/// Replaces the text between `<!-- BEGIN {marker} -->` and `<!-- END {marker} -->` with
/// `table`; None when the markers are missing.
pub fn splice(doc: &str, marker: &str, table: &str) -> Option<String> {
    let begin = format!("<!-- BEGIN {marker} -->\n");
    let end = format!("<!-- END {marker} -->");
    let b = doc.find(&begin)? + begin.len();
    let e = b + doc[b..].find(&end)?;
    Some(format!("{}{}{}", &doc[..b], table, &doc[e..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_entry_is_complete_and_every_code_unique() {
        let mut codes = HashSet::new();
        let mut names = HashSet::new();
        for p in pitfalls() {
            assert!(names.insert(p.name.as_str()), "pitfall {} twice", p.name);
            for (section, text) in [
                ("title", &p.title),
                ("what", &p.what),
                ("why", &p.why),
                ("example", &p.example),
                ("fix", &p.fix),
                ("legitimate", &p.legitimate),
            ] {
                assert!(
                    text.trim().len() >= 8,
                    "{}: section `{section}` is empty",
                    p.name
                );
            }
            assert!(!p.codes.is_empty(), "{} has no code", p.name);
            for c in &p.codes {
                assert!(codes.insert(c.code.as_str()), "{} twice", c.code);
                assert!(c.code.starts_with("GS") && c.code.len() == 5, "{}", c.code);
                assert!(!c.finds.trim().is_empty(), "{}: no table line", c.code);
                let lint = c.code.starts_with("GS3");
                assert_eq!(
                    lint,
                    c.surface == Surface::Lint,
                    "{}: GS3xx are the lint rules",
                    c.code
                );
            }
        }
        assert!(codes.len() >= 50, "{}", codes.len());
    }

    #[test]
    fn a_runtime_check_and_its_lint_rule_share_the_documentation() {
        let run = registered("GS201");
        let lint = registered("GS316");
        assert_eq!(run.doc(), lint.doc());
        assert_eq!(run.category(), Category::Detach);
        assert!(run.doc().contains("Why it breaks training:"));
        let f = lint.finding(Severity::Error, "x");
        assert_eq!((f.code.as_str(), f.category), ("GS316", Category::Detach));
        assert_eq!(registered("GS322").category(), Category::OptimizerMissing);
    }

    /// The generated tables are the ones in README.md and docs/lint.md.
    /// `GRADSLEUTH_BLESS=1 cargo test -p gradsleuth-rules` rewrites them.
    #[test]
    fn the_docs_tables_are_generated_from_the_registry() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let bless = std::env::var_os("GRADSLEUTH_BLESS").is_some();
        for (file, marker, surfaces, with_name) in [
            (
                "README.md",
                "runtime-codes",
                &[Surface::Run, Surface::Merge, Surface::Watch][..],
                false,
            ),
            ("docs/lint.md", "lint-rules", &[Surface::Lint][..], true),
        ] {
            let path = root.join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let table = markdown_table(surfaces, with_name);
            let new = splice(&text, marker, &table)
                .unwrap_or_else(|| panic!("{file}: no `<!-- BEGIN {marker} -->` markers"));
            if bless {
                std::fs::write(&path, &new).unwrap();
            } else {
                assert!(
                    new == text,
                    "{file}: the table differs from the registry; run `GRADSLEUTH_BLESS=1 cargo test -p gradsleuth-rules`"
                );
            }
        }
    }
}
