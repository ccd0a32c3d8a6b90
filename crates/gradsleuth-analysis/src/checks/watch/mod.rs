//! Findings from `watch` (gradient health over the whole run): one check per anomaly kind,
//! each reading the events the monitor recorded (`Capture::watch`).

use gradsleuth_model::capture::{WatchEvent, WatchRec};
use gradsleuth_model::{Finding, Location};

use crate::Context;

pub mod armed;
pub mod dead;
pub mod exploding;
pub mod nonfinite;
pub mod scaler_storm;
pub mod stopped;
pub mod vanishing;

/// The watch record and its events of one kind.
pub(crate) fn events<'c>(
    ctx: &'c Context,
    kind: &str,
) -> Option<(&'c WatchRec, Vec<&'c WatchEvent>)> {
    let w = ctx.capture.watch.as_ref()?;
    let ev: Vec<&WatchEvent> = w
        .events
        .iter()
        .filter(|e| e.kind.as_str() == kind)
        .collect();
    (!ev.is_empty()).then_some((w, ev))
}

/// Where a layer (module) was assigned in its parent's source, when the tracer saw it.
pub(crate) fn layer_location(ctx: &Context, layer: &str) -> Option<Location> {
    let m = ctx.capture.modules.iter().find(|m| m.name == layer)?;
    ctx.locate(m.assigned_at.as_ref())
}

/// Parameters of a layer, from the watch record.
pub(crate) fn layer_params(w: &WatchRec, layer: &str) -> Vec<String> {
    w.params
        .iter()
        .filter(|p| p.layer == layer)
        .map(|p| p.name.clone())
        .collect()
}

/// `steps 40-57` / `step 40`.
pub(crate) fn span(e: &WatchEvent) -> String {
    if e.until > e.step {
        format!("steps {}-{}", e.step, e.until)
    } else {
        format!("step {}", e.step)
    }
}

pub(crate) fn layer_label(name: &str) -> &str {
    if name.is_empty() {
        "(the model's own parameters)"
    } else {
        name
    }
}

/// The tensors (by key) named `names`, claimed so the catch-all does not repeat them.
pub(crate) fn claim_names(ctx: &Context, names: &[String]) {
    let keys: Vec<u64> = ctx
        .capture
        .tensors
        .iter()
        .filter(|t| names.contains(&t.name))
        .map(|t| t.key)
        .collect();
    ctx.claim(keys);
}

/// One finding per layer event, shared by the layer detectors.
pub(crate) fn layer_findings(
    ctx: &Context,
    kind: &str,
    make: impl Fn(&WatchEvent, &str) -> Finding,
) -> Vec<Finding> {
    let Some((w, evs)) = events(ctx, kind) else {
        return Vec::new();
    };
    evs.into_iter()
        .flat_map(|e| e.names.iter().map(move |n| (e, n)))
        .map(|(e, layer)| {
            let mut f = make(e, layer);
            f.params = layer_params(w, layer);
            claim_names(ctx, &f.params);
            if let Some(m) = ctx.capture.modules.iter().find(|m| m.name == *layer) {
                f.message = f.message.replacen(
                    &format!("`{layer}`"),
                    &format!("`{layer}` ({})", m.class),
                    1,
                );
            }
            f.location = layer_location(ctx, layer);
            f.steps = vec![e.step as u32];
            f
        })
        .collect()
}
