//! Renderers: a [`Report`] in, text out. Every command that prints findings (run, diagnose,
//! report, and later lint) goes through here, so a finding looks the same wherever it came
//! from.
//!
//! * [`text`]: the terminal report: a headline, each finding with a rustc/ruff-style code
//!   frame, its chain and its fix, then the parameter table. Colour only when asked
//!   ([`TextOptions::color`]); the CLI decides from the TTY and `NO_COLOR`.
//! * [`json`]: the schema's JSON, pretty-printed.
//! * [`sarif`]: SARIF 2.1.0 for code scanning; [`github`]: GitHub Actions annotations.
//! * [`html`]: one self-contained page (findings, parameter table, `watch`'s charts).

pub mod graph;
mod html;
mod sarif;
pub use html::{escape as html_escape, html};
pub use sarif::{github, sarif, RuleInfo};

use std::fmt::Write;

use anstyle::{AnsiColor, Effects, Style};
use gradsleuth_model::{Finding, Location, ParamStatus, Report, Severity};

#[derive(Debug, Clone, Copy, Default)]
pub struct TextOptions {
    pub color: bool,
    /// Show every parameter row, not only those that do not learn.
    pub all_params: bool,
}

pub fn json(report: &Report) -> String {
    let mut s = report.to_json();
    s.push('\n');
    s
}

struct Paint {
    on: bool,
}

impl Paint {
    fn paint(&self, style: Style, text: &str) -> String {
        if self.on {
            format!("{}{}{}", style.render(), text, style.render_reset())
        } else {
            text.to_owned()
        }
    }
    fn severity(&self, s: Severity) -> Style {
        let c = match s {
            Severity::Error => AnsiColor::Red,
            Severity::Warning => AnsiColor::Yellow,
            Severity::Info => AnsiColor::Cyan,
        };
        Style::new().fg_color(Some(c.into())).effects(Effects::BOLD)
    }
}

fn dim() -> Style {
    Style::new()
        .fg_color(Some(AnsiColor::Blue.into()))
        .effects(Effects::BOLD)
}

fn bold() -> Style {
    Style::new().effects(Effects::BOLD)
}

/// Counts like "2 errors, 1 warning".
pub fn counts(report: &Report) -> String {
    let n = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    let mut parts = Vec::new();
    for (s, word) in [
        (Severity::Error, "error"),
        (Severity::Warning, "warning"),
        (Severity::Info, "info"),
    ] {
        let k = n(s);
        if k > 0 {
            parts.push(if k == 1 || word == "info" {
                format!("{k} {word}")
            } else {
                format!("{k} {word}s")
            });
        }
    }
    if parts.is_empty() {
        "no problems found".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Seconds as a person reads them: `412 ms`, `1.8 s`.
fn duration(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.0} ms", seconds * 1e3)
    } else {
        format!("{seconds:.1} s")
    }
}

/// What observing cost, in one line: `observation: op-level step 412 ms · 2 hook-only steps, 12 ms each (...)`
/// (a mean over op-level steps, a median over hook-only ones).
fn cost_line(c: &gradsleuth_model::report::ObservationCost) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(s) = c.op_level_seconds {
        parts.push(if c.op_level_steps <= 1 {
            format!("op-level step {}", duration(s))
        } else {
            format!("{} op-level steps, {} each", c.op_level_steps, duration(s))
        });
    }
    if let Some(s) = c.cheap_step_seconds {
        parts.push(if c.cheap_steps == 1 {
            format!("1 hook-only step, {}", duration(s))
        } else {
            format!("{} hook-only steps, {} each", c.cheap_steps, duration(s))
        });
    }
    (!parts.is_empty()).then(|| {
        format!(
            "  observation: {} (wall time, gradsleuth's cost included)",
            parts.join(" · ")
        )
    })
}

pub fn text(report: &Report, opts: TextOptions) -> String {
    let p = Paint { on: opts.color };
    let mut out = String::new();
    let learning = report
        .parameters
        .iter()
        .filter(|r| r.status == ParamStatus::Learning)
        .count();
    let mut head = format!("gradsleuth {}: {}", report.command, counts(report));
    if let Some(steps) = report.steps_observed {
        let _ = write!(
            head,
            " · {steps} step{} observed",
            if steps == 1 { "" } else { "s" }
        );
    }
    if !report.parameters.is_empty() {
        let _ = write!(
            head,
            " · {} of {} parameters learning",
            learning,
            report.parameters.len()
        );
    }
    let _ = writeln!(out, "{}", p.paint(bold(), &head));
    if let Some(cost) = report.observation.as_ref().and_then(cost_line) {
        let _ = writeln!(out, "{}", p.paint(dim(), &cost));
    }
    if let Some(err) = &report.error {
        let what = if report.command == "explain" {
            "unrecognised error"
        } else {
            "the script raised"
        };
        let _ = writeln!(
            out,
            "{} {what} {}: {}",
            p.paint(p.severity(Severity::Error), "!"),
            err.kind,
            first_line(&err.message)
        );
        if let Some(e) = &err.explanation {
            let _ = writeln!(
                out,
                "  {} {}: {}",
                p.paint(dim(), "="),
                p.paint(bold(), &e.title),
                e.meaning
            );
            if !err.explained_by.is_empty() {
                let _ = writeln!(
                    out,
                    "  {} explained by {}",
                    p.paint(dim(), "="),
                    err.explained_by.join(", ")
                );
            } else if let Some(c) = e.causes.first() {
                let _ = writeln!(out, "  {} most likely: {c}", p.paint(dim(), "="));
            }
        }
    }
    for f in &report.findings {
        out.push('\n');
        finding(&mut out, f, &p);
    }
    params(&mut out, report, opts, &p);
    flow(&mut out, report, &p);
    out
}

/// A layer (the parameters sharing a name prefix; `""` for the model's own) over the observed
/// steps.
pub(crate) struct LayerSeries<'r> {
    pub name: String,
    pub params: Vec<&'r gradsleuth_model::ParamRow>,
    /// Per step: √ of the sum of its parameters' squared gradient norms (NaN if any is
    /// non-finite; None when none had a gradient).
    pub norms: Vec<Option<f64>>,
}

/// The report's parameters grouped into layers, in model order, with the layer gradient norm
/// per observed step (what the text sparklines and the HTML charts draw).
pub(crate) fn layer_series(report: &Report) -> Vec<LayerSeries<'_>> {
    let steps = report
        .parameters
        .iter()
        .map(|p| p.grad_norm.len())
        .max()
        .unwrap_or(0);
    let mut layers: Vec<LayerSeries> = Vec::new();
    for p in &report.parameters {
        let name = p.name.rsplit_once('.').map_or("", |(l, _)| l);
        let idx = match layers.iter().position(|l| l.name == name) {
            Some(i) => i,
            None => {
                layers.push(LayerSeries {
                    name: name.to_owned(),
                    params: Vec::new(),
                    norms: vec![None; steps],
                });
                layers.len() - 1
            }
        };
        let layer = &mut layers[idx];
        layer.params.push(p);
        for (s, g) in p.grad_norm.iter().enumerate() {
            if let Some(g) = g {
                let cur = layer.norms[s].unwrap_or(0.0);
                layer.norms[s] = Some(if g.is_finite() {
                    (cur * cur + g * g).sqrt()
                } else {
                    f64::NAN
                });
            }
        }
    }
    layers
}

/// One sparkline per layer: its gradient norm per observed step on one log scale for all
/// layers (` ` no gradient, `_` exactly zero, `!` NaN/Inf).
pub fn flow_lines(report: &Report) -> Vec<(String, String)> {
    let layers: Vec<(String, Vec<Option<f64>>)> = layer_series(report)
        .into_iter()
        .map(|l| {
            let name = if l.name.is_empty() {
                "(model)".to_owned()
            } else {
                l.name
            };
            (name, l.norms)
        })
        .collect();
    if layers.first().is_none_or(|(_, v)| v.len() < 2) {
        return Vec::new();
    }
    let logs: Vec<f64> = layers
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(f64::log10)
        .collect();
    let (lo, hi) = logs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    layers
        .into_iter()
        .take(40)
        .map(|(name, vals)| {
            let line: String = vals
                .iter()
                .map(|v| match v {
                    None => ' ',
                    Some(x) if !x.is_finite() => '!',
                    Some(x) if *x == 0.0 => '_',
                    Some(x) => {
                        let t = if hi > lo {
                            (x.log10() - lo) / (hi - lo)
                        } else {
                            1.0
                        };
                        BARS[((t * 7.0).round() as usize).min(7)]
                    }
                })
                .collect();
            (name, line)
        })
        .collect()
}

fn flow(out: &mut String, report: &Report, p: &Paint) {
    let lines = flow_lines(report);
    if lines.is_empty() {
        return;
    }
    let w = lines
        .iter()
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 40);
    let _ = writeln!(
        out,
        "\n{} (per layer, per step, one log scale; ' ' none, '_' zero, '!' NaN)",
        p.paint(bold(), "gradient flow")
    );
    for (name, line) in lines {
        let name: String = name.chars().take(w).collect();
        let _ = writeln!(out, "  {name:<w$}  {line}");
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn finding(out: &mut String, f: &Finding, p: &Paint) {
    let sev = p.paint(
        p.severity(f.severity),
        &format!("{}[{}]", f.severity.as_str(), f.code),
    );
    let _ = writeln!(
        out,
        "{sev} {}: {}",
        p.paint(bold(), &f.category.as_str()),
        f.message
    );
    if let Some(loc) = &f.location {
        frame(out, loc, p);
    }
    let bar = p.paint(dim(), "=");
    if !f.params.is_empty() {
        let shown: Vec<&str> = f.params.iter().take(8).map(String::as_str).collect();
        let more = if f.params.len() > 8 {
            format!(" (+{} more)", f.params.len() - 8)
        } else {
            String::new()
        };
        let _ = writeln!(out, "   {bar} params: {}{more}", shown.join(", "));
    }
    if !f.chain.is_empty() {
        let _ = writeln!(out, "   {bar} chain: {}", f.chain.join(" → "));
    }
    for r in &f.related {
        let _ = writeln!(
            out,
            "   {bar} related: {}:{}: {}",
            r.location.file, r.location.line, r.message
        );
        if let Some(s) = &r.location.snippet {
            let _ = writeln!(out, "       {}", s.trim());
        }
    }
    if !f.steps.is_empty() && f.steps.len() < 20 {
        let s: Vec<String> = f.steps.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "   {bar} steps: {}", s.join(", "));
    }
    if !f.ranks.is_empty() {
        let _ = writeln!(
            out,
            "   {bar} ranks: {}",
            gradsleuth_model::rank_ranges(&f.ranks)
        );
    }
    if let Some(e) = &f.explanation {
        explanation(out, e, p);
    } else if let Some(fix) = &f.fix {
        let _ = writeln!(out, "   {bar} {}: {fix}", p.paint(bold(), "fix"));
    }
}

/// The blocks of an `explain` finding: likely causes, how to check, fixes, fields.
fn explanation(out: &mut String, e: &gradsleuth_model::Explanation, p: &Paint) {
    let bar = p.paint(dim(), "=");
    if !e.fields.is_empty() {
        let fields: Vec<String> = e.fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "   {bar} fields: {}", fields.join(", "));
    }
    if e.occurrences > 1 {
        let _ = writeln!(out, "   {bar} seen {} times", e.occurrences);
    }
    for (title, items) in [
        ("likely causes", &e.causes),
        ("check", &e.checks),
        ("fix", &e.fixes),
    ] {
        if items.is_empty() {
            continue;
        }
        let _ = writeln!(out, "   {bar} {}:", p.paint(bold(), title));
        for (i, item) in items.iter().enumerate() {
            let _ = writeln!(out, "       {}. {item}", i + 1);
        }
    }
    if !e.related_checks.is_empty() {
        let _ = writeln!(
            out,
            "   {bar} `gradsleuth run` finds the cause as: {}",
            e.related_checks.join(", ")
        );
    }
}

/// A rustc-style frame: `--> file:line:col`, the line, a caret underline.
fn frame(out: &mut String, loc: &Location, p: &Paint) {
    // A location of a whole line (a `with` statement found in the source) points at its
    // statement, past the indentation.
    let indent = loc.snippet.as_ref().map_or(0, |s| {
        s.chars().take_while(|c| c.is_whitespace()).count() as u32
    });
    let col = loc.column.unwrap_or(indent + 1);
    let _ = writeln!(
        out,
        "  {} {}:{}:{}",
        p.paint(dim(), "-->"),
        loc.file,
        loc.line,
        col
    );
    let Some(snippet) = &loc.snippet else { return };
    let num = loc.line.to_string();
    let pad = " ".repeat(num.len());
    let gutter = p.paint(dim(), "|");
    let _ = writeln!(out, "{pad} {gutter}");
    let _ = writeln!(out, "{} {gutter} {}", p.paint(dim(), &num), snippet);
    let start = (col as usize).saturating_sub(1);
    let width = snippet.chars().count().saturating_sub(start).max(1);
    let carets = p.paint(
        Style::new().fg_color(Some(AnsiColor::Red.into())),
        &"^".repeat(width),
    );
    let _ = writeln!(out, "{pad} {gutter} {}{carets}", " ".repeat(start));
}

fn fmt_norm(v: &Option<f64>) -> String {
    match v {
        None => "—".into(),
        Some(x) if *x == 0.0 => "0".into(),
        Some(x) => format!("{x:.2e}"),
    }
}

fn params(out: &mut String, report: &Report, opts: TextOptions, p: &Paint) {
    if report.parameters.is_empty() {
        return;
    }
    let rows: Vec<_> = report
        .parameters
        .iter()
        .filter(|r| opts.all_params || r.status != ParamStatus::Learning)
        .collect();
    let hidden = report.parameters.len() - rows.len();
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", p.paint(bold(), "parameters"));
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "  all {} parameters are learning",
            report.parameters.len()
        );
        return;
    }
    let name_w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 48);
    let _ = writeln!(
        out,
        "  {:<name_w$}  {:<14}  {:<12}  {:<5}  grad norm per step",
        "name", "shape", "status", "optim"
    );
    for r in rows {
        let shape = format!("{:?}", r.shape);
        let status_style = match r.status {
            ParamStatus::Learning => Style::new().fg_color(Some(AnsiColor::Green.into())),
            ParamStatus::Frozen => Style::new().fg_color(Some(AnsiColor::Cyan.into())),
            _ => Style::new().fg_color(Some(AnsiColor::Red.into())),
        };
        let status = p.paint(status_style, &format!("{:<12}", r.status.as_str()));
        let norms: Vec<String> = r.grad_norm.iter().take(6).map(fmt_norm).collect();
        let mut name: String = r.name.chars().take(name_w).collect();
        if r.name.chars().count() > name_w {
            name.pop();
            name.push('…');
        }
        let opt = match r.in_optimizer {
            Some(true) => "yes",
            Some(false) => "no",
            None => "?",
        };
        let _ = writeln!(
            out,
            "  {name:<name_w$}  {shape:<14}  {status}  {opt:<5}  {}",
            norms.join(" ")
        );
        if let Some(ranks) = &r.ranks {
            // Distributed: the ranks disagree; say which says what.
            let mut by_status: std::collections::BTreeMap<&str, Vec<u32>> = Default::default();
            for (rank, status) in ranks {
                if let (Ok(rank), Some(status)) = (rank.parse::<u32>(), status.as_str()) {
                    by_status.entry(status).or_default().push(rank);
                }
            }
            let parts: Vec<String> = by_status
                .into_iter()
                .map(|(s, mut rs)| {
                    rs.sort_unstable();
                    format!("{s} on ranks {}", gradsleuth_model::rank_ranges(&rs))
                })
                .collect();
            let _ = writeln!(out, "  {:<name_w$}    ↳ {}", "", parts.join("; "));
        }
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "  … and {hidden} learning parameters (--all-params lists them)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradsleuth_model::{Category, ParamRow};

    #[test]
    fn the_observations_cost_is_one_line() {
        use gradsleuth_model::capture::StepTime;
        let mut r = Report::new("run");
        r.steps_observed = Some(3);
        r.observation = gradsleuth_model::report::ObservationCost::of(&[
            StepTime {
                seconds: 0.412,
                op_level: true,
            },
            StepTime {
                seconds: 0.012,
                op_level: false,
            },
            StepTime {
                seconds: 1.5,
                op_level: false,
            },
        ]);
        let t = text(&r, TextOptions::default());
        assert!(
            t.lines().nth(1).unwrap().starts_with(
                "  observation: op-level step 412 ms · 2 hook-only steps, 1.5 s each (wall time"
            ),
            "{t}"
        );
    }

    fn sample() -> Report {
        let mut r = Report::new("run");
        r.steps_observed = Some(3);
        r.parameters.push(ParamRow {
            name: "heads.0.weight".into(),
            shape: vec![10, 64],
            status: ParamStatus::Unregistered,
            in_optimizer: Some(false),
            grad_norm: vec![Some(0.5), None, Some(0.0)],
            update_norm: vec![],
            ranks: None,
        });
        let mut loc = Location::new("model.py", 14);
        loc.column = Some(9);
        loc.snippet = Some("        self.heads = [nn.Linear(64, 10)]".into());
        r.push_findings(vec![Finding::new(
            "GS103",
            Category::Unregistered,
            Severity::Error,
            "not registered",
        )
        .params(["heads.0.weight".to_string()])
        .at(Some(loc))
        .fix("use nn.ModuleList")]);
        r
    }

    #[test]
    fn a_whole_line_location_points_past_the_indentation() {
        let mut r = sample();
        let loc = r.findings[0].location.as_mut().unwrap();
        loc.column = None;
        loc.snippet = Some("        with torch.no_grad():".into());
        let t = text(&r, TextOptions::default());
        assert!(t.contains("  --> model.py:14:9"), "{t}");
        assert!(t.contains("   |         ^^^^^^^^^^^^^^^^^^^^^\n"), "{t}");
    }

    #[test]
    fn text_report_has_frame_fix_and_table() {
        let t = text(&sample(), TextOptions::default());
        assert!(
            t.starts_with(
                "gradsleuth run: 1 error · 3 steps observed · 0 of 1 parameters learning"
            ),
            "{t}"
        );
        assert!(t.contains("error[GS103] unregistered: not registered"));
        assert!(t.contains("  --> model.py:14:9"));
        assert!(t.contains("14 |         self.heads = [nn.Linear(64, 10)]"));
        assert!(t.contains("   |         ^^^^"));
        assert!(t.contains("= fix: use nn.ModuleList"));
        assert!(t.contains("heads.0.weight  [10, 64]"));
        assert!(t.contains("5.00e-1 — 0"));
        assert!(!t.contains('\x1b'), "no colour unless asked");
        assert!(text(
            &sample(),
            TextOptions {
                color: true,
                ..Default::default()
            }
        )
        .contains('\x1b'));
    }

    #[test]
    fn json_matches_the_schema_field_names() {
        let v: serde_json::Value = serde_json::from_str(&json(&sample())).unwrap();
        assert_eq!(v["tool"], "gradsleuth");
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["findings"][0]["category"], "unregistered");
        assert_eq!(v["findings"][0]["id"], "F1");
        assert_eq!(v["parameters"][0]["grad_norm"][1], serde_json::Value::Null);
    }
}

#[cfg(test)]
mod flow_tests {
    use gradsleuth_model::{ParamRow, ParamStatus, Report};

    fn row(name: &str, g: Vec<Option<f64>>) -> ParamRow {
        ParamRow {
            name: name.into(),
            shape: vec![],
            status: ParamStatus::Learning,
            in_optimizer: Some(true),
            grad_norm: g,
            update_norm: vec![],
            ranks: None,
        }
    }

    #[test]
    fn one_sparkline_per_layer_on_a_shared_log_scale() {
        let mut r = Report::new("run");
        r.parameters = vec![
            row("enc.weight", vec![Some(1.0), Some(10.0), Some(100.0)]),
            row("enc.bias", vec![Some(0.0), Some(0.0), Some(0.0)]),
            row("head.weight", vec![Some(1.0), None, Some(f64::NAN)]),
            row("dead.weight", vec![Some(0.0), Some(0.0), Some(0.0)]),
        ];
        let lines = super::flow_lines(&r);
        assert_eq!(
            lines,
            vec![
                ("enc".to_owned(), "▁▅█".to_owned()),
                ("head".to_owned(), "▁ !".to_owned()),
                ("dead".to_owned(), "___".to_owned()),
            ]
        );
    }
}
