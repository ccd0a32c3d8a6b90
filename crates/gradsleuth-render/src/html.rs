//! A self-contained HTML report (no network, no CDN): the summary, every finding with its
//! code frame, chain and fix, the parameter table (sortable, filterable by status), and, for
//! `watch`, the gradient-flow chart over the whole run (per layer, log scale, NaN/zero/no
//! gradient marked) and the update-to-weight ratio chart, drawn as SVG here. Every text that
//! comes from the user's code or names is escaped.

use std::fmt::Write;

use gradsleuth_model::capture::WatchRec;
use gradsleuth_model::{Finding, Report, Severity};

/// `&`, `<`, `>`, `"`, `'` escaped: safe in text and in attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}\
h1{font-size:20px}h2{font-size:16px;margin-top:2em}.f{border:1px solid #ddd;border-left:5px solid #999;padding:.6em 1em;margin:.8em 0;border-radius:4px}\
.error{border-left-color:#c62828}.warning{border-left-color:#ef8f00}.info{border-left-color:#1976d2}\
.sev{font-weight:600;text-transform:uppercase;font-size:12px}pre{background:#f6f8fa;padding:.5em;overflow:auto}\
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #eee;padding:3px 6px;text-align:left;font-size:13px}\
th{cursor:pointer;background:#fafafa}.learning{color:#2e7d32}.bad{color:#c62828}.muted{color:#777}svg text{font-size:11px}";

const SCRIPT: &str = "function gsSort(t,c){var b=t.tBodies[0],r=[].slice.call(b.rows),a=t.dataset.dir==c?-1:1;t.dataset.dir=a==1?c:'';\
r.sort(function(x,y){var p=x.cells[c].dataset.v||x.cells[c].textContent,q=y.cells[c].dataset.v||y.cells[c].textContent,\
m=parseFloat(p),n=parseFloat(q);return (isNaN(m)||isNaN(n)?p.localeCompare(q):m-n)*a});r.forEach(function(e){b.appendChild(e)})}\
function gsFilter(s){[].forEach.call(document.querySelectorAll('#params tbody tr'),function(r){r.style.display=!s||r.dataset.status==s?'':'none'})}";

fn finding(out: &mut String, f: &Finding) {
    let sev = f.severity.as_str();
    let _ = write!(
        out,
        "<div class=\"f {sev}\" data-code=\"{}\"><span class=\"sev\">{sev}</span> <b>{}</b> <span class=\"muted\">{}</span><p>{}</p>",
        escape(&f.code),
        escape(&f.code),
        escape(&f.category.as_str()),
        escape(&f.message)
    );
    if let Some(l) = &f.location {
        let _ = write!(
            out,
            "<div class=\"muted\">{}:{}</div>",
            escape(&l.file),
            l.line
        );
        if let Some(s) = &l.snippet {
            let _ = write!(out, "<pre>{:>5} | {}</pre>", l.line, escape(s));
        }
    }
    if !f.params.is_empty() {
        let _ = write!(
            out,
            "<div>params: <code>{}</code></div>",
            escape(&f.params.join(", "))
        );
    }
    if !f.chain.is_empty() {
        let _ = write!(out, "<div>chain: {}</div>", escape(&f.chain.join(" → ")));
    }
    for r in &f.related {
        let _ = write!(
            out,
            "<div class=\"muted\">related: {}:{}: {}</div>",
            escape(&r.location.file),
            r.location.line,
            escape(&r.message)
        );
    }
    if !f.ranks.is_empty() {
        let _ = write!(
            out,
            "<div class=\"muted\">ranks: {}</div>",
            escape(&gradsleuth_model::rank_ranges(&f.ranks))
        );
    }
    if let Some(fix) = &f.fix {
        let _ = write!(out, "<div><b>fix:</b> {}</div>", escape(fix));
    }
    out.push_str("</div>");
}

fn params(out: &mut String, report: &Report) {
    if report.parameters.is_empty() {
        return;
    }
    let mut statuses: Vec<&str> = report
        .parameters
        .iter()
        .map(|p| p.status.as_str())
        .collect();
    statuses.sort_unstable();
    statuses.dedup();
    out.push_str("<h2>Parameters</h2><label>status <select onchange=\"gsFilter(this.value)\"><option value=\"\">all</option>");
    for s in statuses {
        let _ = write!(out, "<option>{s}</option>");
    }
    out.push_str("</select></label><table id=\"params\"><thead><tr>");
    for (i, h) in [
        "name",
        "shape",
        "status",
        "optimizer",
        "grad norm (last)",
        "update norm (last)",
    ]
    .iter()
    .enumerate()
    {
        let _ = write!(
            out,
            "<th onclick=\"gsSort(this.closest('table'),{i})\">{h}</th>"
        );
    }
    out.push_str("</tr></thead><tbody>");
    for p in &report.parameters {
        let last = |v: &[Option<f64>]| v.iter().rev().flatten().next().copied();
        let num = |v: Option<f64>| {
            v.map_or(("".to_owned(), "—".to_owned()), |x| {
                (format!("{x}"), format!("{x:.3e}"))
            })
        };
        let (gv, gt) = num(last(&p.grad_norm));
        let (uv, ut) = num(last(&p.update_norm));
        let class = if p.status.as_str() == "learning" {
            "learning"
        } else {
            "bad"
        };
        let _ = write!(
            out,
            "<tr data-status=\"{0}\"><td>{1}</td><td>{2:?}</td><td class=\"{class}\">{0}</td><td>{3}</td><td data-v=\"{gv}\">{gt}</td><td data-v=\"{uv}\">{ut}</td></tr>",
            p.status.as_str(),
            escape(&p.name),
            p.shape,
            match p.in_optimizer {
                Some(true) => "yes",
                Some(false) => "no",
                None => "?",
            },
        );
    }
    out.push_str("</tbody></table>");
}

const PALETTE: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// A log-scale line chart: one series per layer, x = step.
fn chart(
    out: &mut String,
    title: &str,
    id: &str,
    w: &WatchRec,
    value: impl Fn(&gradsleuth_model::capture::WatchBucket) -> Option<f64>,
) {
    let (width, height, left, bottom) = (900.0, 320.0, 60.0, 30.0);
    let series: Vec<(&str, Vec<(f64, f64)>)> = w
        .layers
        .iter()
        .map(|l| {
            let pts = l
                .buckets
                .iter()
                .filter_map(|b| {
                    value(b)
                        .filter(|v| *v > 0.0 && v.is_finite())
                        .map(|v| (b.step as f64, v.log10()))
                })
                .collect();
            (l.name.as_str(), pts)
        })
        .collect();
    let all: Vec<(f64, f64)> = series.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    let _ = write!(out, "<h2>{}</h2>", escape(title));
    if all.is_empty() {
        out.push_str("<p class=\"muted\">no values</p>");
        return;
    }
    let (xmin, xmax) = (1.0, (w.steps.max(2)) as f64);
    let ymin = all
        .iter()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .floor();
    let ymax = all
        .iter()
        .map(|p| p.1)
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .max(ymin + 1.0);
    let sx = |x: f64| left + (x - xmin) / (xmax - xmin).max(1.0) * (width - left - 10.0);
    let sy = |y: f64| (height - bottom) - (y - ymin) / (ymax - ymin) * (height - bottom - 10.0);
    let _ = write!(out, "<svg id=\"{id}\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\">");
    let mut y = ymin;
    while y <= ymax {
        let _ = write!(
            out,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{1:.1}\" y2=\"{1:.1}\" stroke=\"#eee\"/><text x=\"4\" y=\"{2:.1}\">1e{3}</text>",
            width - 10.0,
            sy(y),
            sy(y) + 4.0,
            y as i64
        );
        y += 1.0;
    }
    let _ = write!(out, "<text x=\"{}\" y=\"{}\">step</text><text x=\"{left}\" y=\"{}\">1</text><text x=\"{}\" y=\"{}\">{}</text>", width / 2.0, height - 4.0, height - 14.0, width - 60.0, height - 14.0, w.steps);
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let label = if name.is_empty() { "(root)" } else { name };
        if !pts.is_empty() {
            let path: Vec<String> = pts
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
                .collect();
            let _ = write!(
                out,
                "<polyline class=\"layer\" data-layer=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title></polyline>",
                escape(label),
                path.join(" "),
                escape(label)
            );
        }
        // Marks: non-finite (red), exactly zero (grey), no gradient (hollow).
        if let Some(layer) = w.layers.get(i) {
            for b in &layer.buckets {
                let x = sx(b.step as f64);
                if b.nonfinite > 0 {
                    let _ = write!(out, "<text class=\"nonfinite\" x=\"{x:.1}\" y=\"14\" fill=\"#c62828\">✕<title>{} NaN/Inf at step {}</title></text>", escape(label), b.step);
                } else if b.zero == b.steps && b.steps > 0 {
                    let _ = write!(out, "<circle class=\"zero\" cx=\"{x:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"#999\"><title>{} zero</title></circle>", height - bottom, escape(label));
                } else if b.none == b.steps && b.steps > 0 {
                    let _ = write!(out, "<circle class=\"none\" cx=\"{x:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"none\" stroke=\"#999\"><title>{} no gradient</title></circle>", height - bottom, escape(label));
                }
            }
        }
    }
    out.push_str("</svg><div class=\"muted\">");
    for (i, (name, _)) in series.iter().enumerate().take(40) {
        let label = if name.is_empty() { "(root)" } else { name };
        let _ = write!(
            out,
            "<span style=\"color:{}\">■</span> {} &nbsp;",
            PALETTE[i % PALETTE.len()],
            escape(label)
        );
    }
    out.push_str("</div>");
}

/// The report as one HTML page.
pub fn html(report: &Report, watch: Option<&WatchRec>) -> String {
    let mut out = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>gradsleuth report</title>",
    );
    let _ = write!(
        out,
        "<style>{STYLE}</style><script>{SCRIPT}</script></head><body>"
    );
    let errors = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    let _ = write!(
        out,
        "<h1>gradsleuth {}: {} error(s), {} warning(s)</h1><p class=\"muted\">{}{}</p>",
        escape(&report.command),
        errors,
        warnings,
        escape(report.target.script.as_deref().unwrap_or("")),
        report
            .steps_observed
            .map(|s| format!(" · {s} steps observed"))
            .unwrap_or_default()
    );
    if let Some(e) = &report.error {
        let _ = write!(
            out,
            "<div class=\"f error\"><b>the script raised {}</b>: {}</div>",
            escape(&e.kind),
            escape(&e.message)
        );
    }
    out.push_str("<h2>Summary</h2><ul id=\"summary\">");
    for f in &report.findings {
        let _ = write!(
            out,
            "<li>{} <b>{}</b>: {}</li>",
            f.severity.as_str(),
            escape(&f.code),
            escape(f.message.lines().next().unwrap_or(""))
        );
    }
    if report.findings.is_empty() {
        out.push_str("<li>no problems found</li>");
    }
    out.push_str("</ul><h2>Findings</h2>");
    for f in &report.findings {
        finding(&mut out, f);
    }
    if let Some(w) = watch {
        chart(
            &mut out,
            "Gradient flow: layer gradient norm over the run (log scale)",
            "grad-flow",
            w,
            |b| b.mean,
        );
        chart(
            &mut out,
            "Update-to-weight ratio (sampled steps, log scale)",
            "update-ratio",
            w,
            |b| b.update_ratio,
        );
        if let Some(tb) = &w.tensorboard {
            let _ = write!(
                out,
                "<p class=\"muted\">TensorBoard events: {}</p>",
                escape(tb)
            );
        }
    }
    params(&mut out, report);
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradsleuth_model::capture::{WatchBucket, WatchLayer};
    use gradsleuth_model::{Category, Location, ParamRow, ParamStatus};

    #[test]
    fn user_text_is_escaped_everywhere() {
        let mut r = Report::new("run");
        let mut l = Location::new("train.py", 3);
        l.snippet = Some("x = '</svg><script>alert(1)</script>'".into());
        r.push_findings(vec![Finding::new(
            "GS101",
            Category::Frozen,
            Severity::Error,
            "bad <b>",
        )
        .at(Some(l))]);
        r.parameters.push(ParamRow {
            name: "<script>alert(1)</script>".into(),
            shape: vec![2],
            status: ParamStatus::GradNone,
            in_optimizer: Some(true),
            grad_norm: vec![],
            update_norm: vec![],
            ranks: None,
        });
        let page = html(&r, None);
        assert!(!page.contains("<script>alert(1)"));
        assert!(!page.contains("</svg><script>"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert_eq!(page.matches("<script>").count(), 1); // ours only
    }

    #[test]
    fn the_chart_has_a_line_per_layer_and_marks_nan() {
        let bucket = |step, mean, nonfinite| WatchBucket {
            step,
            steps: 1,
            mean: Some(mean),
            nonfinite,
            ..Default::default()
        };
        let w = WatchRec {
            steps: 3,
            layers: vec![
                WatchLayer {
                    name: "enc".into(),
                    stride: 1,
                    buckets: vec![bucket(1, 1.0, 0), bucket(2, 0.5, 0), bucket(3, 0.1, 1)],
                },
                WatchLayer {
                    name: "head".into(),
                    stride: 1,
                    buckets: vec![bucket(1, 1e-3, 0), bucket(2, 1e-3, 0), bucket(3, 1e-4, 0)],
                },
            ],
            ..Default::default()
        };
        let page = html(&Report::new("watch"), Some(&w));
        assert_eq!(page.matches("<polyline class=\"layer\"").count(), 2);
        assert!(page.contains("data-layer=\"enc\"") && page.contains("class=\"nonfinite\""));
    }
}
