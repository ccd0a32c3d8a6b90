//! A self-contained HTML report (no network, no CDN): the summary, every finding with its
//! code frame, chain and fix, the parameter table (sortable, filterable by status), and, for
//! `watch`, the gradient-flow chart over the whole run (per layer, log scale, NaN/zero/no
//! gradient marked) and the update-to-weight ratio chart, drawn as SVG here. Every text that
//! comes from the user's code or names is escaped.

use std::fmt::Write;

use gradsleuth_model::capture::{Capture, WatchBucket, WatchLayer, WatchRec};
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

/// The parameter table is data (`#params-data`) drawn by this script, at most `gsLimit` rows at
/// a time: a model with 100,000 parameters must not make a 100,000-row DOM. Sorting and the
/// status filter work on the data.
const SCRIPT: &str = "var gsRows=[],gsShown=[],gsKey=-1,gsDir=1,gsLimit=500,gsStatus='';\
function gsText(v){return v==null?'—':typeof v=='number'?v.toExponential(3):String(v)}\
function gsDraw(){var b=document.querySelector('#params tbody');if(!b)return;b.textContent='';\
gsShown.slice(0,gsLimit).forEach(function(r){var tr=document.createElement('tr');tr.dataset.status=r[2];\
r.forEach(function(v,i){var td=document.createElement('td');td.textContent=i==1?JSON.stringify(v):gsText(v);\
if(i==2)td.className=v=='learning'?'learning':'bad';tr.appendChild(td)});b.appendChild(tr)});\
var n=document.getElementById('params-count');if(n)n.textContent=gsShown.length>gsLimit?\
'showing '+gsLimit+' of '+gsShown.length+' (sort or filter to see others)':gsShown.length+' parameter(s)'}\
function gsApply(){gsShown=gsRows.filter(function(r){return !gsStatus||r[2]==gsStatus});\
if(gsKey>=0)gsShown.sort(function(x,y){var p=x[gsKey],q=y[gsKey];if(p==null)return 1;if(q==null)return -1;\
return (typeof p=='number'&&typeof q=='number'?p-q:String(p).localeCompare(String(q)))*gsDir});gsDraw()}\
function gsSort(t,c){gsDir=gsKey==c?-gsDir:1;gsKey=c;gsApply()}\
function gsFilter(s){gsStatus=s;gsApply()}\
document.addEventListener('DOMContentLoaded',function(){var d=document.getElementById('params-data');\
if(d){gsRows=JSON.parse(d.textContent);gsApply()}})";

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

/// JSON safe inside a `<script>` element (no `</script>`, no `<!--`).
fn script_json(v: &serde_json::Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Weight norms per step, by parameter name (from the capture's optimizer steps).
fn weights_by_name(capture: Option<&Capture>) -> std::collections::HashMap<&str, Vec<f64>> {
    let mut out: std::collections::HashMap<&str, Vec<f64>> = Default::default();
    let Some(c) = capture else { return out };
    let names = crate::graph::tensor_names(c);
    for s in &c.steps {
        for (k, w) in &s.weight_before {
            if let Some(n) = names.get(k) {
                out.entry(n).or_default().push(*w);
            }
        }
    }
    out
}

fn params(out: &mut String, report: &Report, capture: Option<&Capture>) {
    // Weight norms per step, for the update-to-weight ratio column.
    let weights = weights_by_name(capture);
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
    out.push_str("</select></label> <span id=\"params-count\" class=\"muted\"></span><table id=\"params\"><thead><tr>");
    for (i, h) in [
        "name",
        "shape",
        "status",
        "optimizer",
        "grad norm per step",
        "update norm per step",
        "update/weight per step",
    ]
    .iter()
    .enumerate()
    {
        let _ = write!(
            out,
            "<th onclick=\"gsSort(this.closest('table'),{i})\">{h}</th>"
        );
    }
    out.push_str("</tr></thead><tbody></tbody></table>");
    let last = |v: &[Option<f64>]| v.iter().rev().flatten().next().copied();
    let rows: Vec<serde_json::Value> = report
        .parameters
        .iter()
        .map(|p| {
            let series = |v: &[Option<f64>]| {
                v.iter()
                    .map(|x| x.map_or("—".to_owned(), |x| format!("{x:.2e}")))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let ratio = {
                let w = weights.get(p.name.as_str());
                let ratios: Vec<Option<f64>> = p
                    .update_norm
                    .iter()
                    .enumerate()
                    .map(|(i, u)| {
                        let w = *w?.get(i)?;
                        u.filter(|_| w > 0.0).map(|u| u / w)
                    })
                    .collect();
                if ratios.iter().any(Option::is_some) {
                    serde_json::Value::from(series(&ratios))
                } else {
                    serde_json::Value::Null
                }
            };
            serde_json::json!([
                p.name,
                p.shape,
                p.status.as_str(),
                match p.in_optimizer {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "?",
                },
                if p.grad_norm.len() > 1 {
                    serde_json::Value::from(series(&p.grad_norm))
                } else {
                    serde_json::json!(last(&p.grad_norm))
                },
                if p.update_norm.len() > 1 {
                    serde_json::Value::from(series(&p.update_norm))
                } else {
                    serde_json::json!(last(&p.update_norm))
                },
                ratio,
            ])
        })
        .collect();
    let _ = write!(
        out,
        "<script type=\"application/json\" id=\"params-data\">{}</script>",
        script_json(&serde_json::Value::from(rows))
    );
}

const PALETTE: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// A log-scale line chart: one series per layer, x = step.
/// With more than 40 layers, layers of repeated blocks (`blocks.0.ff`, `blocks.1.ff`, ...) as
/// one series each: the mean of their norms and (drawn dashed) the max, so a 300-block model is
/// a readable chart. At most 40 series.
fn grouped(w: &WatchRec) -> WatchRec {
    if w.layers.len() <= 40 {
        return w.clone();
    }
    let mut groups: Vec<(String, Vec<&WatchLayer>)> = Vec::new();
    for l in &w.layers {
        let key = crate::graph::repeat_key(&l.name).unwrap_or_else(|| l.name.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(l),
            None => groups.push((key, vec![l])),
        }
    }
    let layers = groups
        .into_iter()
        .take(40)
        .map(|(key, members)| {
            if members.len() == 1 {
                return members[0].clone();
            }
            let n = members.iter().map(|m| m.buckets.len()).max().unwrap_or(0);
            let buckets = (0..n)
                .map(|i| {
                    let bs: Vec<&WatchBucket> =
                        members.iter().filter_map(|m| m.buckets.get(i)).collect();
                    let avg = |f: &dyn Fn(&WatchBucket) -> Option<f64>| {
                        let v: Vec<f64> = bs.iter().filter_map(|b| f(b)).collect();
                        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
                    };
                    WatchBucket {
                        step: bs.first().map_or(0, |b| b.step),
                        steps: bs.first().map_or(0, |b| b.steps),
                        mean: avg(&|b| b.mean),
                        max: bs.iter().filter_map(|b| b.max).reduce(f64::max),
                        min: bs.iter().filter_map(|b| b.min).reduce(f64::min),
                        none: bs.iter().map(|b| b.none).sum(),
                        zero: if bs.iter().all(|b| b.zero == b.steps) {
                            bs.first().map_or(0, |b| b.steps)
                        } else {
                            0
                        },
                        nonfinite: bs.iter().map(|b| b.nonfinite).sum(),
                        update_ratio: avg(&|b| b.update_ratio),
                    }
                })
                .collect();
            WatchLayer {
                name: format!("{key} (×{})", members.len()),
                stride: members[0].stride,
                buckets,
            }
        })
        .collect();
    WatchRec {
        steps: w.steps,
        layers,
        tensorboard: w.tensorboard.clone(),
        ..Default::default()
    }
}

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
        // A group of repeated layers: its max too, dashed.
        if let Some(layer) = w
            .layers
            .get(i)
            .filter(|l| l.name.ends_with(')') && l.name.contains("(×"))
        {
            let path: Vec<String> = layer
                .buckets
                .iter()
                .filter_map(|b| {
                    b.max
                        .filter(|v| *v > 0.0 && v.is_finite())
                        .map(|v| format!("{:.1},{:.1}", sx(b.step as f64), sy(v.log10())))
                })
                .collect();
            if !path.is_empty() && id == "grad-flow" {
                let _ = write!(
                    out,
                    "<polyline class=\"layer-max\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1\" stroke-dasharray=\"3 3\" points=\"{}\"><title>{} (max)</title></polyline>",
                    path.join(" "),
                    escape(label)
                );
            }
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

/// The observed first steps as per-layer series (what `watch` records for a whole run): layer
/// gradient norm per step (√ of the sum of its parameters' squared norms) and the mean
/// update-to-weight ratio.
fn first_steps(report: &Report, capture: Option<&Capture>) -> Option<WatchRec> {
    let layers = crate::layer_series(report);
    let steps = layers.first().map_or(0, |l| l.norms.len());
    if steps == 0 {
        return None;
    }
    let weight = weights_by_name(capture);
    let layers = layers
        .into_iter()
        .map(|l| {
            let buckets = l
                .norms
                .iter()
                .enumerate()
                .map(|(s, norm)| {
                    let ratios: Vec<f64> = l
                        .params
                        .iter()
                        .filter_map(|p| {
                            let u = p.update_norm.get(s).copied().flatten()?;
                            let w = *weight.get(p.name.as_str())?.get(s)?;
                            (w > 0.0).then_some(u / w)
                        })
                        .collect();
                    let finite = norm.filter(|v| v.is_finite());
                    WatchBucket {
                        step: s as u64 + 1,
                        steps: 1,
                        mean: finite,
                        max: finite,
                        min: finite,
                        none: u64::from(norm.is_none()),
                        zero: u64::from(*norm == Some(0.0)),
                        nonfinite: u64::from(norm.is_some_and(|v| !v.is_finite())),
                        update_ratio: (!ratios.is_empty())
                            .then(|| ratios.iter().sum::<f64>() / ratios.len() as f64),
                    }
                })
                .collect();
            WatchLayer {
                name: l.name,
                stride: 1,
                buckets,
            }
        })
        .collect();
    Some(WatchRec {
        steps: steps as u64,
        layers,
        ..Default::default()
    })
}

/// The report as one HTML page; with the capture, the autograd graph picture and the
/// gradient-flow charts (of the whole run under `watch`, of the observed steps otherwise).
pub fn html(report: &Report, capture: Option<&Capture>) -> String {
    let watch = capture.and_then(|c| c.watch.as_ref());
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
    if let (Some(c), true) = (capture, capture.is_some_and(|c| c.graph.is_some())) {
        if let Some(p) = crate::graph::picture(c, report) {
            out.push_str("<h2>Autograd graph</h2><div style=\"overflow:auto\">");
            out.push_str(&crate::graph::svg(&p));
            out.push_str("</div>");
        }
    }
    let observed = if watch.is_none() {
        first_steps(report, capture)
    } else {
        None
    };
    let grouped_rec = watch.or(observed.as_ref()).map(grouped);
    if let Some(w) = grouped_rec.as_ref() {
        let span = if watch.is_some() {
            "over the run"
        } else {
            "over the observed steps"
        };
        chart(
            &mut out,
            &format!("Gradient flow: layer gradient norm {span} (log scale)"),
            "grad-flow",
            w,
            |b| b.mean,
        );
        chart(
            &mut out,
            &format!("Update-to-weight ratio {span} (log scale)"),
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
    params(&mut out, report, capture);
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
        // The parameter table's data: no `<` survives inside the JSON script element.
        assert!(page.contains("\\u003cscript\\u003ealert(1)\\u003c/script\\u003e"));
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
        let capture = Capture {
            watch: Some(w),
            ..Default::default()
        };
        let page = html(&Report::new("watch"), Some(&capture));
        assert_eq!(page.matches("<polyline class=\"layer\"").count(), 2);
        assert!(page.contains("data-layer=\"enc\"") && page.contains("class=\"nonfinite\""));
    }
}
