//! Names as the user's model gives them. Frameworks wrap the user's model (DDP's `module`,
//! `torch.compile`'s `_orig_mod`, FSDP1's `_fsdp_wrapped_module`, PEFT's `base_model.model`,
//! DeepSpeed's engine, Lightning Fabric's `_FabricModule`) and layers inside it (FSDP1's nested
//! units, torch's activation-checkpoint wrapper). A parameter or layer is named inside the
//! user's model: the outer wrappers' path taken off once, the inner wrappers' components
//! dropped, as those wrappers' own checkpoints name them.

/// Wrappers around layers inside a model, named away in their state dicts.
const INNER: [&str; 2] = ["_fsdp_wrapped_module", "_checkpoint_wrapped_module"];

/// The attribute (a dotted path) through which an instance of `class` holds the model it wraps,
/// or None when `class` wraps nothing.
pub fn wrapped_attr(class: &str) -> Option<&'static str> {
    match class {
        "DeepSpeedEngine" | "DistributedDataParallel" | "DataParallel" => Some("module"),
        "OptimizedModule" => Some("_orig_mod"),
        "FullyShardedDataParallel" => Some("_fsdp_wrapped_module"),
        "_FabricModule" => Some("_forward_module"),
        c if c.starts_with("PeftModel") => Some("base_model.model"),
        _ => None,
    }
}

/// `name`, dotted inside the outermost module, as inside the user's model. `prefix` is the
/// path through the wrappers around the model, with a trailing dot (`module._orig_mod.`), or
/// empty; the wrapper itself (`module`) is the model's root, named "".
pub fn unwrapped(name: &str, prefix: &str) -> String {
    let rest = match name.strip_prefix(prefix) {
        Some(rest) => rest,
        None if name.len() + 1 == prefix.len() && prefix.starts_with(name) => return String::new(),
        None => name,
    };
    if !rest.contains("_wrapped_module") {
        return rest.to_owned();
    }
    rest.split('.')
        .filter(|c| !INNER.contains(c))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outer_wrappers_are_taken_off_once() {
        assert_eq!(unwrapped("module.fc.weight", "module."), "fc.weight");
        assert_eq!(unwrapped("module", "module."), "");
        assert_eq!(
            unwrapped("module._orig_mod.enc.0.bias", "module._orig_mod."),
            "enc.0.bias"
        );
        // The model's own `module` attribute, below the wrapper, stays.
        assert_eq!(
            unwrapped("module.module.weight", "module."),
            "module.weight"
        );
        assert_eq!(unwrapped("fc.weight", ""), "fc.weight");
        assert_eq!(unwrapped("modules.0", "module."), "modules.0");
    }

    #[test]
    fn inner_wrappers_are_dropped_wherever_they_are() {
        assert_eq!(
            unwrapped(
                "1._fsdp_wrapped_module.norm.weight",
                "_fsdp_wrapped_module."
            ),
            "1.norm.weight"
        );
        assert_eq!(
            unwrapped(
                "layers.0._fsdp_wrapped_module._checkpoint_wrapped_module.ff.bias",
                ""
            ),
            "layers.0.ff.bias"
        );
        assert_eq!(unwrapped("1._fsdp_wrapped_module", ""), "1");
        // A layer of the user's whose name merely contains the words stays.
        assert_eq!(
            unwrapped("my_fsdp_wrapped_module_x.w", ""),
            "my_fsdp_wrapped_module_x.w"
        );
    }

    #[test]
    fn wrappers_are_known_by_class() {
        assert_eq!(wrapped_attr("DistributedDataParallel"), Some("module"));
        assert_eq!(
            wrapped_attr("PeftModelForCausalLM"),
            Some("base_model.model")
        );
        assert_eq!(wrapped_attr("OptimizedModule"), Some("_orig_mod"));
        assert_eq!(wrapped_attr("Sequential"), None);
    }
}
