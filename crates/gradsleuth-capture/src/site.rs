//! The user's own frames: the one place gradsleuth decides which Python frame is user code.
//!
//! Frames of torch, of gradsleuth, of `<frozen ...>`/`<string>` code and of the stdlib modules
//! that only forward calls (`runpy`, `contextlib`, `functools`) are skipped. Frames of installed
//! libraries (anything under `site-packages`/`dist-packages`, Python's own library) are not the
//! user's either: a site is the innermost *user* frame, and the innermost library frame inside
//! it, when there is one, rides along as [`Site::via`] (a finding's related place), so a cut
//! inside `transformers` is located at the user's line that called into it. The binding layer
//! reads each code object's file and name once and asks [`CodeFilter::code`]; the answer is
//! cached there by the code object's address.

use std::path::Path;
use std::sync::Arc;

use gradsleuth_model::finding::PACKAGE_DIRS;

/// Stdlib modules whose frames only forward calls.
const FORWARDING: &[&str] = &["runpy.py", "contextlib.py", "functools.py"];

/// A user frame: absolute file, line, function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub file: Arc<str>,
    pub line: u32,
    pub function: Arc<str>,
    /// The innermost library frame this user frame called into (the library's line where the
    /// op actually ran), when the op ran inside an installed library.
    pub via: Option<Arc<Site>>,
}

impl Site {
    pub fn new(file: &str, line: u32, function: &str) -> Site {
        Site {
            file: file.into(),
            line,
            function: function.into(),
            via: None,
        }
    }
}

/// What a code object is to the walk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Code {
    /// torch's, gradsleuth's, generated or forwarding code: never shown.
    Skip,
    /// An installed library's code: shown only as where a user line's call ended up.
    Library(Arc<str>, Arc<str>),
    /// The user's own code: (absolute file, qualified name).
    User(Arc<str>, Arc<str>),
}

/// Decides which code is the user's, by file path.
#[derive(Clone, Debug, Default)]
pub struct CodeFilter {
    skip_prefixes: Vec<String>,
    library_prefixes: Vec<String>,
}

impl CodeFilter {
    /// `skip_prefixes`: folders whose files are never shown (torch's, gradsleuth's).
    pub fn new(skip_prefixes: Vec<String>) -> Self {
        CodeFilter {
            skip_prefixes,
            library_prefixes: Vec::new(),
        }
    }

    /// Folders, besides any `site-packages`/`dist-packages`, whose code is a library's
    /// (Python's standard library).
    pub fn with_libraries(mut self, library_prefixes: Vec<String>) -> Self {
        self.library_prefixes = library_prefixes;
        self
    }

    /// Whether code in `file` belongs to an installed library (or Python's own).
    pub fn is_library(&self, file: &str) -> bool {
        PACKAGE_DIRS.iter().any(|d| file.contains(d))
            || self
                .library_prefixes
                .iter()
                .any(|p| !p.is_empty() && file.starts_with(p.as_str()))
    }

    /// Whether `file` lies in one of the folders never shown (gradsleuth's own, torch's).
    pub fn in_skipped_folder(&self, file: &str) -> bool {
        self.skip_prefixes
            .iter()
            .any(|p| file.starts_with(p.as_str()))
    }

    /// Whether code in `file` is skipped.
    pub fn skips(&self, file: &str) -> bool {
        let base = Path::new(file)
            .file_name()
            .and_then(|b| b.to_str())
            .unwrap_or("");
        file.starts_with('<') || FORWARDING.contains(&base) || self.in_skipped_folder(file)
    }

    /// What code in `file` is: skipped, a library's, or the user's (with its absolute file).
    pub fn classify(&self, file: &str, qualname: &str) -> Code {
        let Some((f, q)) = self.code(file, qualname) else {
            return Code::Skip;
        };
        if self.is_library(&f) {
            Code::Library(f, q)
        } else {
            Code::User(f, q)
        }
    }

    /// (absolute file, qualified name) of code in `file` that is not skipped, or None.
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

    #[test]
    fn installed_packages_and_the_stdlib_are_libraries_not_user_code() {
        let f = CodeFilter::new(vec!["/v/lib/python3.11/site-packages/torch/".into()])
            .with_libraries(vec!["/usr/lib/python3.11/".into()]);
        let lib = "/v/lib/python3.11/site-packages/transformers/modeling_layers.py";
        assert!(matches!(f.classify(lib, "X.__call__"), Code::Library(..)));
        assert!(matches!(
            f.classify(
                "/usr/local/lib/python3.12/dist-packages/peft/tuners/lora.py",
                "f"
            ),
            Code::Library(..)
        ));
        assert!(matches!(
            f.classify("/usr/lib/python3.11/threading.py", "run"),
            Code::Library(..)
        ));
        assert_eq!(
            f.classify(
                "/v/lib/python3.11/site-packages/torch/nn/functional.py",
                "f"
            ),
            Code::Skip
        );
        assert!(matches!(
            f.classify("/home/u/proj/train.py", "main"),
            Code::User(..)
        ));
    }
}
