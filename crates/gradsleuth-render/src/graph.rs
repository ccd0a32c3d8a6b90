//! The autograd graph as a picture a person can read: nodes grouped by the module that made
//! them, repeated blocks (transformer layers, ResNet stages) collapsed to one box with a count,
//! parameters' modules coloured by status, and each cut (a detach, a `no_grad` block, a
//! round trip) drawn as a red broken edge labelled with its line. Laid out here, in layers from
//! the inputs (left) to the loss (right), so a 100,000-node graph is a few dozen boxes.
//!
//! [`svg`] draws it; [`dot`] writes the node-level graph for Graphviz.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt::Write;

use gradsleuth_model::capture::{Capture, GraphRec};
use gradsleuth_model::{ParamStatus, Report};

use crate::html::escape;

/// What makes repeated blocks the same: the name with its index replaced, the class, and the
/// autograd node types it made (with counts).
type BlockKey<'a> = (String, String, Vec<(&'a str, usize)>);

/// One box of the picture.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Display name (`encoder.layers.0-11`).
    pub name: String,
    pub class: String,
    /// Module names it stands for (several when repeated blocks were collapsed).
    pub members: Vec<String>,
    pub nodes: usize,
    /// Worst parameter status inside (None: no parameters).
    pub status: Option<ParamStatus>,
    /// Parameters inside that the loss does not reach.
    pub unreached: usize,
    pub column: usize,
    pub row: usize,
}

/// The module-level picture.
#[derive(Debug, Clone, Default)]
pub struct Picture {
    pub clusters: Vec<Cluster>,
    /// (from, to) in forward direction.
    pub edges: BTreeSet<(usize, usize)>,
    /// (from cluster, label): a cut between the cluster's parameters and the loss.
    pub cuts: Vec<(usize, String)>,
    pub loss: usize,
    pub graph_nodes: usize,
    pub truncated: bool,
}

fn status_rank(s: ParamStatus) -> u8 {
    match s {
        ParamStatus::Learning => 0,
        ParamStatus::Frozen => 1,
        _ => 2,
    }
}

/// `layers.7.attn` -> `layers.*.attn` when a segment is an index.
pub(crate) fn repeat_key(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('.').collect();
    let i = parts
        .iter()
        .rposition(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))?;
    let mut k = parts.clone();
    k[i] = "*";
    Some(k.join("."))
}

fn truncate_path(name: &str, depth: usize) -> String {
    name.split('.').take(depth).collect::<Vec<_>>().join(".")
}

/// Tensor key -> qualified name.
pub(crate) fn tensor_names(capture: &Capture) -> HashMap<u64, &str> {
    capture
        .tensors
        .iter()
        .map(|t| (t.key, t.name.as_str()))
        .collect()
}

/// Parameter name -> status in the report.
fn statuses(report: &Report) -> HashMap<&str, ParamStatus> {
    report
        .parameters
        .iter()
        .map(|p| (p.name.as_str(), p.status))
        .collect()
}

/// A module path as a box title (`(model)` for the root's own ops).
fn display(name: &str) -> String {
    if name.is_empty() {
        "(model)".into()
    } else {
        name.to_owned()
    }
}

impl Cluster {
    fn new(name: String, class: String, members: Vec<String>) -> Cluster {
        Cluster {
            name,
            class,
            members,
            nodes: 0,
            status: None,
            unreached: 0,
            column: 0,
            row: 0,
        }
    }
}

/// Groups the graph into module clusters at a depth that keeps the picture small.
pub fn picture(capture: &Capture, report: &Report) -> Option<Picture> {
    let g: &GraphRec = capture.graph.as_ref()?;
    if g.nodes.is_empty() {
        return None;
    }
    let module_name: HashMap<u64, String> = capture
        .modules
        .iter()
        .map(|m| {
            let name = if m.kind == gradsleuth_model::capture::ModuleKind::Root {
                String::new()
            } else {
                m.name.clone()
            };
            (m.key, name)
        })
        .collect();
    let module_class: HashMap<String, String> = capture
        .modules
        .iter()
        .map(|m| {
            (
                module_name.get(&m.key).cloned().unwrap_or_default(),
                m.class.clone(),
            )
        })
        .collect();
    let tensor_module: HashMap<u64, String> = capture
        .tensors
        .iter()
        .filter_map(|t| Some((t.key, module_name.get(&t.module?)?.clone())))
        .collect();
    let status = statuses(report);
    let tensor_name = tensor_names(capture);

    // The module of each node: a parameter leaf belongs to its parameter's module.
    let node_module: Vec<Option<String>> = g
        .nodes
        .iter()
        .map(|n| {
            n.param
                .and_then(|p| tensor_module.get(&p).cloned())
                .or_else(|| n.module.and_then(|m| module_name.get(&m).cloned()))
        })
        .collect();

    // The deepest grouping that stays readable once repeats are collapsed.
    let mut depth = 1;
    for d in 1..=4 {
        let names: BTreeSet<String> = node_module
            .iter()
            .flatten()
            .map(|m| truncate_path(m, d))
            .collect();
        let collapsed: BTreeSet<String> = names
            .iter()
            .map(|n| repeat_key(n).unwrap_or_else(|| n.clone()))
            .collect();
        if collapsed.len() <= 48 {
            depth = d;
        } else {
            break;
        }
    }
    // Node signature per truncated module: what it computes (node types), to know which
    // repeated blocks are the same.
    let mut sig: BTreeMap<String, BTreeMap<&str, usize>> = BTreeMap::new();
    for (n, m) in g.nodes.iter().zip(&node_module) {
        if let Some(m) = m {
            *sig.entry(truncate_path(m, depth))
                .or_default()
                .entry(n.name.as_str())
                .or_default() += 1;
        }
    }
    // Cluster of each truncated module name.
    let mut cluster_of: HashMap<String, usize> = HashMap::new();
    let mut clusters: Vec<Cluster> = Vec::new();
    let mut by_key: HashMap<BlockKey, usize> = HashMap::new();
    for (name, s) in &sig {
        let class = module_class.get(name).cloned().unwrap_or_default();
        let flat: Vec<(&str, usize)> = s.iter().map(|(k, v)| (*k, *v)).collect();
        let key = repeat_key(name).map(|k| (k, class.clone(), flat));
        let idx = match key.as_ref().and_then(|k| by_key.get(k)) {
            Some(&i) => {
                clusters[i].members.push(name.clone());
                i
            }
            None => {
                clusters.push(Cluster::new(display(name), class, vec![name.clone()]));
                if let Some(k) = key {
                    by_key.insert(k, clusters.len() - 1);
                }
                clusters.len() - 1
            }
        };
        cluster_of.insert(name.clone(), idx);
    }
    for c in &mut clusters {
        if c.members.len() > 1 {
            // Members in index order (`layers.2` before `layers.10`), named by the range.
            let index = |m: &String| {
                m.rsplit('.')
                    .find_map(|p| p.parse::<u64>().ok())
                    .unwrap_or(u64::MAX)
            };
            c.members.sort_by_key(index);
            let hi = index(&c.members[c.members.len() - 1]);
            let first = &c.members[0];
            c.name = format!("{first}–{hi} ×{}", c.members.len());
        }
    }
    let loss = clusters.len();
    clusters.push(Cluster::new("loss".into(), String::new(), vec![]));
    let node_cluster: Vec<usize> = node_module
        .iter()
        .map(|m| {
            m.as_ref()
                .and_then(|m| cluster_of.get(&truncate_path(m, depth)).copied())
                .unwrap_or(loss)
        })
        .collect();
    for (i, c) in node_cluster.iter().enumerate() {
        clusters[*c].nodes += 1;
        if let Some(p) = g.nodes[i].param {
            if let Some(s) = tensor_name.get(&p).and_then(|n| status.get(n)) {
                let cur = clusters[*c].status;
                if cur.is_none_or(|c| status_rank(*s) > status_rank(c)) {
                    clusters[*c].status = Some(*s);
                }
            }
        }
    }
    // Parameters the loss does not reach: their modules join the picture, unconnected.
    let in_graph: BTreeSet<u64> = g.nodes.iter().filter_map(|n| n.param).collect();
    for t in &capture.tensors {
        if t.kind != gradsleuth_model::capture::TensorKind::Param || in_graph.contains(&t.key) {
            continue;
        }
        let Some(m) = t.module.and_then(|m| module_name.get(&m)) else {
            continue;
        };
        let name = truncate_path(m, depth);
        let idx = match cluster_of.get(&name) {
            Some(&i) => i,
            None => {
                clusters.push(Cluster::new(
                    display(&name),
                    module_class.get(&name).cloned().unwrap_or_default(),
                    vec![name.clone()],
                ));
                cluster_of.insert(name, clusters.len() - 1);
                clusters.len() - 1
            }
        };
        clusters[idx].unreached += 1;
        if let Some(s) = status.get(t.name.as_str()) {
            let cur = clusters[idx].status;
            if cur.is_none_or(|c| status_rank(*s) > status_rank(c)) {
                clusters[idx].status = Some(*s);
            }
        }
    }
    let mut edges = BTreeSet::new();
    for &(consumer, input) in &g.edges {
        let (a, b) = (
            node_cluster[input as usize],
            node_cluster[consumer as usize],
        );
        if a != b {
            edges.insert((a, b));
        }
    }
    // Cuts: from the cluster of the parameters behind each cut to the loss.
    let mut cuts = Vec::new();
    for cut in &capture.cuts {
        let from: BTreeSet<usize> = cut
            .params
            .iter()
            .filter_map(|k| tensor_module.get(k))
            .filter_map(|m| cluster_of.get(&truncate_path(m, depth)).copied())
            .collect();
        let label = match &cut.location {
            Some(l) => format!(
                "✂ {} ({}) at {}:{}",
                cut.kind,
                cut.op,
                short(&l.file),
                l.line
            ),
            None => format!("✂ {} ({})", cut.kind, cut.op),
        };
        for f in from {
            if !cuts.contains(&(f, label.clone())) {
                cuts.push((f, label.clone()));
            }
        }
    }
    // Columns: how far (in nodes) a cluster's earliest node is from the loss.
    let mut dist = vec![usize::MAX; g.nodes.len()];
    let mut adj: Vec<Vec<u32>> = vec![Vec::new(); g.nodes.len()];
    for &(c, i) in &g.edges {
        adj[c as usize].push(i);
    }
    let mut q = VecDeque::from([0usize]);
    dist[0] = 0;
    while let Some(n) = q.pop_front() {
        for &m in &adj[n] {
            if dist[m as usize] == usize::MAX {
                dist[m as usize] = dist[n] + 1;
                q.push_back(m as usize);
            }
        }
    }
    let mut far = vec![0usize; clusters.len()];
    for (i, c) in node_cluster.iter().enumerate() {
        if dist[i] != usize::MAX {
            far[*c] = far[*c].max(dist[i]);
        }
    }
    far[loss] = 0;
    let max_far = far.iter().copied().max().unwrap_or(0);
    for (i, c) in clusters.iter_mut().enumerate() {
        // Unconnected clusters (nothing reached) go to the far left.
        far[i] = if c.nodes == 0 && i != loss {
            max_far + 1
        } else {
            far[i]
        };
    }
    let mut levels: Vec<usize> = far.clone();
    levels.sort_unstable();
    levels.dedup();
    levels.reverse();
    for (i, c) in clusters.iter_mut().enumerate() {
        c.column = levels.iter().position(|l| *l == far[i]).unwrap_or(0);
    }
    // Rows: in column order, by the mean row of the clusters feeding each one.
    let columns = levels.len();
    let mut next_row = vec![0usize; columns];
    let mut order: Vec<usize> = (0..clusters.len()).collect();
    order.sort_by_key(|&i| (clusters[i].column, i));
    for i in order {
        let preds: Vec<usize> = edges
            .iter()
            .filter(|(_, b)| *b == i)
            .map(|(a, _)| clusters[*a].row)
            .collect();
        let want = if preds.is_empty() {
            0
        } else {
            preds.iter().sum::<usize>() / preds.len()
        };
        let col = clusters[i].column;
        let row = want.max(next_row[col]);
        clusters[i].row = row;
        next_row[col] = row + 1;
    }
    Some(Picture {
        clusters,
        edges,
        cuts,
        loss,
        graph_nodes: g.nodes.len(),
        truncated: g.truncated,
    })
}

fn short(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

const W: f64 = 170.0;
const H: f64 = 46.0;
const GX: f64 = 70.0;
const GY: f64 = 22.0;

fn pos(c: &Cluster) -> (f64, f64) {
    (
        10.0 + c.column as f64 * (W + GX),
        30.0 + c.row as f64 * (H + GY),
    )
}

/// The picture as SVG (with a list of the collapsed blocks' members under it).
pub fn svg(p: &Picture) -> String {
    let width = p
        .clusters
        .iter()
        .map(|c| pos(c).0 + W + 10.0)
        .fold(300.0, f64::max)
        + 150.0;
    let height = p
        .clusters
        .iter()
        .map(|c| pos(c).1 + H + 10.0)
        .fold(120.0, f64::max)
        + 20.0;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg id=\"autograd-graph\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\">\
         <text x=\"10\" y=\"16\">{} autograd nodes in {} boxes{}: inputs left, loss right</text>",
        p.graph_nodes,
        p.clusters.len(),
        if p.truncated { " (graph truncated)" } else { "" }
    );
    out.push_str("<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" fill=\"#888\"/></marker></defs>");
    for &(a, b) in &p.edges {
        let (ax, ay) = pos(&p.clusters[a]);
        let (bx, by) = pos(&p.clusters[b]);
        let (x1, y1, x2, y2) = (ax + W, ay + H / 2.0, bx, by + H / 2.0);
        let _ = write!(
            out,
            "<path class=\"edge\" d=\"M{x1:.1},{y1:.1} C{:.1},{y1:.1} {:.1},{y2:.1} {x2:.1},{y2:.1}\" fill=\"none\" stroke=\"#aaa\" marker-end=\"url(#arrow)\"/>",
            x1 + GX / 2.0,
            x2 - GX / 2.0
        );
    }
    let mut labelled = BTreeSet::new();
    for (i, (from, label)) in p.cuts.iter().enumerate() {
        let (ax, ay) = pos(&p.clusters[*from]);
        let (bx, by) = pos(&p.clusters[p.loss]);
        let (x1, y1, x2, y2) = (
            ax + W,
            ay + H / 2.0 + 4.0 * (i % 4) as f64,
            bx,
            by + H / 2.0,
        );
        let (mx, my) = ((x1 + x2) / 2.0, (y1 + y2) / 2.0);
        // A broken edge: two segments with a gap where the graph was cut; each cut's label once.
        let text = if labelled.insert(label.as_str()) {
            format!(
                "<text x=\"{mx:.1}\" y=\"{:.1}\" fill=\"#d32f2f\" text-anchor=\"middle\">{}</text>",
                my - 8.0,
                escape(label)
            )
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<g class=\"cut\"><line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#d32f2f\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\
             <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"#d32f2f\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>{text}</g>",
            mx - 8.0,
            my - 3.0,
            mx + 8.0,
            my + 3.0,
        );
    }
    for (i, c) in p.clusters.iter().enumerate() {
        let (x, y) = pos(c);
        let fill = match c.status {
            None => "#f5f5f5",
            Some(ParamStatus::Learning) => "#e8f5e9",
            Some(ParamStatus::Frozen) => "#e3f2fd",
            Some(_) => "#ffebee",
        };
        let stroke = if c.status.is_some_and(|s| status_rank(s) == 2) {
            "#d32f2f"
        } else {
            "#999"
        };
        let extra = if c.members.len() > 1 {
            " stroke-dasharray=\"1 0\" stroke-width=\"3\""
        } else {
            ""
        };
        let status =
            c.status
                .map(|s| s.as_str())
                .unwrap_or(if i == p.loss { "" } else { "no parameters" });
        let _ = write!(
            out,
            "<g class=\"cluster\" data-name=\"{}\" data-status=\"{}\"><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{W}\" height=\"{H}\" rx=\"5\" fill=\"{fill}\" stroke=\"{stroke}\"{extra}/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-weight=\"600\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#555\">{} · {} nodes{}</text>\
             <title>{}</title></g>",
            escape(&c.name),
            status,
            x + 6.0,
            y + 17.0,
            escape(&clip(&c.name, 24)),
            x + 6.0,
            y + 35.0,
            escape(&clip(&c.class, 12)),
            c.nodes,
            if c.unreached > 0 { format!(" · {} unreached", c.unreached) } else { String::new() },
            escape(&format!("{} ({}) {status}: {}", c.name, c.class, c.members.join(", ")))
        );
    }
    out.push_str("</svg>");
    let groups: Vec<&Cluster> = p.clusters.iter().filter(|c| c.members.len() > 1).collect();
    if !groups.is_empty() {
        out.push_str("<details id=\"collapsed\"><summary>collapsed repeated blocks</summary><ul>");
        for c in groups {
            let _ = write!(
                out,
                "<li><b>{}</b> ({}): {}</li>",
                escape(&c.name),
                escape(&c.class),
                escape(&c.members.join(", "))
            );
        }
        out.push_str("</ul></details>");
    }
    out
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The node-level graph for Graphviz: a cluster per module, parameters coloured by status,
/// cuts as red dashed edges to the loss.
pub fn dot(capture: &Capture, report: &Report) -> String {
    let mut out =
        String::from("digraph autograd {\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n");
    let Some(g) = &capture.graph else {
        out.push_str("  empty [label=\"no autograd graph was captured\"];\n}\n");
        return out;
    };
    let module_name: HashMap<u64, &str> = capture
        .modules
        .iter()
        .map(|m| (m.key, m.name.as_str()))
        .collect();
    let tensor_name = tensor_names(capture);
    let status = statuses(report);
    let mut by_module: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        by_module
            .entry(
                n.module
                    .and_then(|m| module_name.get(&m).copied())
                    .unwrap_or(""),
            )
            .or_default()
            .push(i);
    }
    for (ci, (m, nodes)) in by_module.iter().enumerate() {
        if !m.is_empty() {
            let _ = writeln!(
                out,
                "  subgraph cluster_{ci} {{\n    label=\"{}\";",
                dot_escape(m)
            );
        }
        for &i in nodes {
            let n = &g.nodes[i];
            match n.param.and_then(|p| tensor_name.get(&p)) {
                Some(name) => {
                    let color = match status.get(name) {
                        Some(ParamStatus::Learning) => "palegreen",
                        Some(ParamStatus::Frozen) => "lightblue",
                        _ => "lightpink",
                    };
                    let _ = writeln!(
                        out,
                        "    n{i} [label=\"{}\", style=filled, fillcolor={color}];",
                        dot_escape(name)
                    );
                }
                None => {
                    let _ = writeln!(out, "    n{i} [label=\"{}\"];", dot_escape(&n.name));
                }
            }
        }
        if !m.is_empty() {
            out.push_str("  }\n");
        }
    }
    for &(c, i) in &g.edges {
        let _ = writeln!(out, "  n{i} -> n{c};");
    }
    for (k, cut) in capture.cuts.iter().enumerate() {
        let label = match &cut.location {
            Some(l) => format!("{} at {}:{}", cut.kind, short(&l.file), l.line),
            None => cut.kind.to_string(),
        };
        for p in &cut.params {
            if let Some(name) = tensor_name.get(p) {
                let _ = writeln!(
                    out,
                    "  cut{k}_{p} [label=\"{}\", style=filled, fillcolor=lightpink];",
                    dot_escape(name)
                );
                let _ = writeln!(
                    out,
                    "  cut{k}_{p} -> n0 [color=red, style=dashed, label=\"{}\"];",
                    dot_escape(&label)
                );
            }
        }
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradsleuth_model::capture::{
        CutRec, GraphNode, ModuleKind, ModuleRec, TensorKind, TensorRec,
    };
    use gradsleuth_model::{Location, ParamRow};

    /// A 12-layer encoder whose embedding is cut by a detach.
    fn capture() -> (Capture, Report) {
        let mut c = Capture::default();
        let mut r = Report::new("run");
        let mut module = |key, name: &str, class: &str, kind| {
            c.modules.push(ModuleRec {
                key,
                name: name.into(),
                class: class.into(),
                kind,
                ..Default::default()
            });
        };
        module(1, "model", "Net", ModuleKind::Root);
        module(2, "embed", "Linear", ModuleKind::Registered);
        for i in 0..12 {
            module(
                10 + i,
                &format!("layers.{i}"),
                "Block",
                ModuleKind::Registered,
            );
        }
        module(30, "head", "Linear", ModuleKind::Registered);
        let mut g = GraphRec::default();
        let mut node = |name: &str, module: Option<u64>, param: Option<u64>| {
            g.nodes.push(GraphNode {
                name: name.into(),
                module,
                param,
            });
            g.nodes.len() as u32 - 1
        };
        let loss = node("MseLossBackward0", None, None);
        let head = node("AddmmBackward0", Some(30), None);
        let head_w = node("AccumulateGrad", Some(30), Some(300));
        let mut edges = vec![(loss, head), (head, head_w)];
        let mut prev = head;
        for i in (0..12).rev() {
            let a = node("AddmmBackward0", Some(10 + i), None);
            let b = node("ReluBackward0", Some(10 + i), None);
            let w = node("AccumulateGrad", Some(10 + i), Some(100 + i));
            edges.extend([(prev, b), (b, a), (a, w)]);
            prev = a;
        }
        g.edges = edges;
        c.graph = Some(g);
        let mut tensor = |key, name: &str, module| {
            c.tensors.push(TensorRec {
                key,
                name: name.into(),
                kind: TensorKind::Param,
                module: Some(module),
                requires_grad: true,
                is_leaf: true,
                ..Default::default()
            });
        };
        tensor(300, "head.weight", 30);
        for i in 0..12 {
            tensor(100 + i, &format!("layers.{i}.weight"), 10 + i);
        }
        tensor(200, "embed.weight", 2);
        c.cuts.push(CutRec {
            kind: gradsleuth_model::Category::Detach,
            op: "Tensor.detach".into(),
            location: Some(Location::new("/x/train.py", 15)),
            params: vec![200],
            ..Default::default()
        });
        for t in &c.tensors {
            r.parameters.push(ParamRow {
                name: t.name.clone(),
                shape: vec![],
                status: if t.key == 200 {
                    ParamStatus::GradNone
                } else {
                    ParamStatus::Learning
                },
                in_optimizer: Some(true),
                grad_norm: vec![],
                update_norm: vec![],
                ranks: None,
            });
        }
        (c, r)
    }

    #[test]
    fn repeated_blocks_collapse_and_the_cut_is_drawn() {
        let (c, r) = capture();
        let p = picture(&c, &r).unwrap();
        let names: Vec<&str> = p.clusters.iter().map(|c| c.name.as_str()).collect();
        assert!(names.contains(&"layers.0–11 ×12"), "{names:?}");
        assert!(names.contains(&"embed") && names.contains(&"head") && names.contains(&"loss"));
        assert_eq!(p.clusters.len(), 4);
        let embed = p.clusters.iter().position(|c| c.name == "embed").unwrap();
        assert_eq!(p.clusters[embed].status, Some(ParamStatus::GradNone));
        assert_eq!(p.clusters[embed].unreached, 1);
        assert_eq!(
            p.cuts,
            vec![(embed, "✂ detach (Tensor.detach) at train.py:15".to_owned())]
        );
        // Inputs left, loss right.
        let loss = p.clusters.iter().find(|c| c.name == "loss").unwrap();
        assert!(p.clusters.iter().all(|c| c.column <= loss.column));
        let s = svg(&p);
        assert!(s.contains("class=\"cut\"") && s.contains("stroke=\"#d32f2f\""));
        assert!(s.contains("<details id=\"collapsed\">"));
    }

    #[test]
    fn dot_has_clusters_and_the_cut() {
        let (c, r) = capture();
        let d = dot(&c, &r);
        assert!(d.starts_with("digraph autograd {"));
        assert_eq!(d.matches("subgraph cluster_").count(), 13);
        assert!(d.contains("color=red, style=dashed, label=\"detach at train.py:15\""));
    }
}
