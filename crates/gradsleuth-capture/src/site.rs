//! The user's own frames: the one place gradsleuth decides which Python frame is user code.
//!
//! Frames of torch, of gradsleuth, of `<frozen ...>`/`<string>` code and of the stdlib modules
//! that only forward calls (`runpy`, `contextlib`, `functools`) are skipped. The binding layer
//! reads each code object's file and name once and asks [`CodeFilter::code`]; the answer is
//! cached there by the code object's address.

use std::path::Path;
use std::sync::Arc;

/// Stdlib modules whose frames only forward calls.
const FORWARDING: &[&str] = &["runpy.py", "contextlib.py", "functools.py"];

/// A user frame: absolute file, line, function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub file: Arc<str>,
    pub line: u32,
    pub function: Arc<str>,
}

impl Site {
    pub fn new(file: &str, line: u32, function: &str) -> Site {
        Site {
            file: file.into(),
            line,
            function: function.into(),
        }
    }
}

/// Decides which code is the user's, by file path.
#[derive(Clone, Debug, Default)]
pub struct CodeFilter {
    skip_prefixes: Vec<String>,
}

impl CodeFilter {
    /// `skip_prefixes`: folders whose files are never user code (torch's, gradsleuth's).
    pub fn new(skip_prefixes: Vec<String>) -> Self {
        CodeFilter { skip_prefixes }
    }

    /// Whether code in `file` is skipped.
    pub fn skips(&self, file: &str) -> bool {
        let base = Path::new(file)
            .file_name()
            .and_then(|b| b.to_str())
            .unwrap_or("");
        file.starts_with('<')
            || FORWARDING.contains(&base)
            || self
                .skip_prefixes
                .iter()
                .any(|p| file.starts_with(p.as_str()))
    }

    /// (absolute file, qualified name) of user code in `file`, or None for code to skip.
    pub fn code(&self, file: &str, qualname: &str) -> Option<(Arc<str>, Arc<str>)> {
        if self.skips(file) {
            return None;
        }
        let path = Path::new(file);
        let file = if path.is_absolute() {
            file.to_owned()
        } else {
            std::env::current_dir()
                .map(|d| d.join(path).to_string_lossy().into_owned())
                .unwrap_or_else(|_| file.to_owned())
        };
        Some((file.into(), qualname.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_and_forwarding_frames_are_skipped() {
        let f = CodeFilter::new(vec!["/site/torch/".into()]);
        assert!(f.skips("/site/torch/nn/modules/module.py"));
        assert!(f.skips("<frozen runpy>"));
        assert!(f.skips("/usr/lib/python3.11/contextlib.py"));
        assert!(!f.skips("/home/u/train.py"));
        let (file, name) = f.code("/home/u/train.py", "Net.forward").unwrap();
        assert_eq!((&*file, &*name), ("/home/u/train.py", "Net.forward"));
        assert!(f.code("/site/torch/functional.py", "x").is_none());
    }
}
