//! SARIF 2.1.0 (code scanning) and GitHub workflow-command annotations.

use gradsleuth_model::{Finding, Location, Report, Severity};
use serde_json::{json, Value};

/// What SARIF says about a rule: its code, short name and documentation.
#[derive(Debug, Clone)]
pub struct RuleInfo {
    pub code: String,
    pub name: String,
    pub category: String,
    /// One line (SARIF's short description).
    pub title: String,
    /// The documentation as plain text and as Markdown.
    pub doc: String,
    pub doc_markdown: String,
}

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

/// A path as a SARIF URI: forward slashes, relative paths against `%SRCROOT%`.
fn artifact(file: &str) -> Value {
    let uri = file.replace('\\', "/");
    let uri = uri.strip_prefix("./").unwrap_or(&uri).to_owned();
    if uri.starts_with('/') {
        json!({ "uri": format!("file://{uri}") })
    } else {
        json!({ "uri": uri, "uriBaseId": "%SRCROOT%" })
    }
}

fn physical(l: &Location) -> Value {
    let mut region = json!({ "startLine": l.line });
    if let Some(c) = l.column {
        region["startColumn"] = json!(c);
    }
    if let Some(e) = l.end_line {
        region["endLine"] = json!(e);
    }
    if let Some(e) = l.end_column {
        region["endColumn"] = json!(e);
    }
    if let Some(s) = &l.snippet {
        region["snippet"] = json!({ "text": s });
    }
    json!({ "physicalLocation": { "artifactLocation": artifact(&l.file), "region": region } })
}

fn result(f: &Finding, rules: &[RuleInfo]) -> Value {
    let mut text = f.message.clone();
    if let Some(fix) = &f.fix {
        text.push_str(" Fix: ");
        text.push_str(fix);
    }
    let mut r = json!({
        "ruleId": f.code,
        "level": level(f.severity),
        "message": { "text": text },
        "properties": { "category": f.category.as_str() },
    });
    if let Some(i) = rules.iter().position(|x| x.code == f.code) {
        r["ruleIndex"] = json!(i);
    }
    if let Some(l) = &f.location {
        r["locations"] = json!([physical(l)]);
        // Stable across unrelated edits: code + file + the line's text.
        r["partialFingerprints"] = json!({
            "gradsleuth/v1": format!("{}:{}:{}", f.code, l.file, l.snippet.as_deref().unwrap_or("").trim()),
        });
    }
    if !f.related.is_empty() {
        r["relatedLocations"] = f
            .related
            .iter()
            .enumerate()
            .map(|(i, rel)| {
                let mut v = physical(&rel.location);
                v["id"] = json!(i);
                v["message"] = json!({ "text": rel.message });
                v
            })
            .collect();
    }
    if !f.params.is_empty() {
        r["properties"]["params"] = json!(f.params);
    }
    r
}

/// The report as one SARIF 2.1.0 log with one run.
pub fn sarif(report: &Report, rules: &[RuleInfo]) -> String {
    let rule_objs: Vec<Value> = rules
        .iter()
        .map(|r| {
            json!({
                "id": r.code,
                "name": r.name,
                "shortDescription": { "text": r.title },
                "fullDescription": { "text": r.doc },
                "help": { "text": r.doc, "markdown": r.doc_markdown },
                "properties": { "category": r.category },
            })
        })
        .collect();
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "gradsleuth",
                "version": report.tool_version,
                "semanticVersion": report.tool_version,
                "rules": rule_objs,
            }},
            "results": report.findings.iter().map(|f| result(f, rules)).collect::<Vec<_>>(),
            "columnKind": "unicodeCodePoints",
        }],
    });
    let mut s = serde_json::to_string_pretty(&log).unwrap_or_default();
    s.push('\n');
    s
}

/// GitHub's escaping for workflow-command data and properties.
fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// One `::error file=...,line=...::message` line per finding (GitHub Actions annotations).
pub fn github(report: &Report) -> String {
    let mut out = String::new();
    for f in &report.findings {
        let kind = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "notice",
        };
        let mut props = Vec::new();
        if let Some(l) = &f.location {
            props.push(format!("file={}", escape_property(&l.file)));
            props.push(format!("line={}", l.line));
            if let Some(c) = l.column {
                props.push(format!("col={c}"));
            }
            if let Some(e) = l.end_line {
                props.push(format!("endLine={e}"));
            }
            if let Some(e) = l.end_column {
                props.push(format!("endColumn={e}"));
            }
        }
        props.push(format!(
            "title={}",
            escape_property(&format!("gradsleuth {}", f.code))
        ));
        let mut msg = format!("{} ({})", f.message, f.category.as_str());
        if let Some(fix) = &f.fix {
            msg.push_str("\nFix: ");
            msg.push_str(fix);
        }
        out.push_str(&format!(
            "::{kind} {}::{}\n",
            props.join(","),
            escape_data(&msg)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradsleuth_model::Category;

    fn report() -> Report {
        let mut r = Report::new("lint");
        let mut l = Location::new("src/train, v2.py", 12);
        l.column = Some(5);
        l.snippet = Some("h = x.detach()".into());
        r.push_findings(vec![Finding::new(
            "GS316",
            Category::Detach,
            Severity::Error,
            "50% of it: cut\nhere",
        )
        .at(Some(l))]);
        r
    }

    #[test]
    fn sarif_has_rules_results_and_regions() {
        let rules = [RuleInfo {
            code: "GS316".into(),
            name: "detach-cuts-module".into(),
            category: "detach".into(),
            title: "title".into(),
            doc: "doc".into(),
            doc_markdown: "**doc**".into(),
        }];
        let v: Value = serde_json::from_str(&sarif(&report(), &rules)).unwrap();
        assert_eq!(v["version"], "2.1.0");
        let res = &v["runs"][0]["results"][0];
        assert_eq!(res["ruleId"], "GS316");
        assert_eq!(res["ruleIndex"], 0);
        assert_eq!(res["level"], "error");
        let loc = &res["locations"][0]["physicalLocation"];
        assert_eq!(loc["artifactLocation"]["uri"], "src/train, v2.py");
        assert_eq!(loc["region"]["startLine"], 12);
        assert_eq!(loc["region"]["startColumn"], 5);
        assert_eq!(v["runs"][0]["tool"]["driver"]["rules"][0]["id"], "GS316");
    }

    #[test]
    fn github_annotations_escape_data_and_properties() {
        let out = github(&report());
        assert_eq!(
            out,
            "::error file=src/train%2C v2.py,line=12,col=5,title=gradsleuth GS316::50%25 of it: cut%0Ahere (detach)\n"
        );
    }
}
