//! Which torch the tracer supports: the one place that knows the oldest version and why.
//!
//! The tracer learns which parameters a backward reached from post-accumulate-grad hooks
//! (`Tensor.register_post_accumulate_grad_hook`), which torch 2.1 introduced; older torch has
//! no equivalent a tracer can use without keeping gradients alive, so `gradsleuth run` refuses
//! it (exit 2) instead of reporting every parameter as unreached. `make compat` runs the whole
//! corpus on torch 2.1, 2.4, 2.8, 2.12 and 2.15 (and Python 3.10 to 3.13) and holds the answers
//! word for word equal. What differs between supported versions is bridged in one Python
//! module, `gradsleuth/_versions.py` (`torch.cuda.amp.GradScaler` before `torch.amp`'s in 2.3,
//! the C tensor base's name, `_foreach_norm` without `dtype` in 2.1, `torch.compiler.
//! is_compiling` from 2.3), and in Rust where the difference reaches it: op names of the C base
//! (`oplog::classify`), wrappers of autograd nodes that die with their last reference before
//! 2.13 (`gradsleuth-graph`).

/// The oldest torch `gradsleuth run` supports, as (major, minor).
pub const OLDEST_TORCH: (u32, u32) = (2, 1);

/// (major, minor) of a torch version string: `2.4.1+cu121`, `2.16.0a0+git1234`, `2.1`.
pub fn torch_release(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// Why `gradsleuth run` cannot trace under this torch, or `None` when it can (a version it
/// cannot read is given the benefit of the doubt: a build from source may say anything).
pub fn torch_refusal(version: &str) -> Option<String> {
    let found = torch_release(version)?;
    if found >= OLDEST_TORCH {
        return None;
    }
    let (major, minor) = OLDEST_TORCH;
    Some(format!(
        "gradsleuth run needs torch {major}.{minor} or newer; this interpreter has torch {}. \
         The tracer learns which parameters a backward reached from post-accumulate-grad hooks, \
         which torch {major}.{minor} introduced. Upgrade torch (`pip install \"torch>={major}.{minor}\"`); \
         `gradsleuth lint`, `explain` and `where` work with any torch.",
        version.trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_read_from_every_shape_of_version() {
        assert_eq!(torch_release("2.4.1+cu121"), Some((2, 4)));
        assert_eq!(torch_release("2.16.0a0+git1234abc"), Some((2, 16)));
        assert_eq!(torch_release("2.1"), Some((2, 1)));
        assert_eq!(torch_release("2.10.0"), Some((2, 10)));
        assert_eq!(torch_release("nightly"), None);
        assert_eq!(torch_release(""), None);
    }

    #[test]
    fn only_torch_older_than_2_1_is_refused_and_the_refusal_says_why() {
        for ok in ["2.1.0", "2.1.2+cu121", "2.15.0", "2.10.1", "3.0.0", "weird"] {
            assert_eq!(torch_refusal(ok), None, "{ok}");
        }
        for old in ["2.0.1", "1.13.1+cpu", "2.0.0a0"] {
            let why = torch_refusal(old).unwrap_or_default();
            assert!(
                why.contains("torch 2.1 or newer") && why.contains(old),
                "{why}"
            );
            assert!(why.contains("post-accumulate-grad hooks"), "{why}");
        }
    }
}
