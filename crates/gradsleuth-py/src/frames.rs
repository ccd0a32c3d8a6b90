//! Python frames read for the user's own code; which code that is, is decided in
//! `gradsleuth_capture::site`. What a code object is (skipped, or its absolute file and
//! qualified name) is cached by its address, so a walk costs a few attribute reads per frame.
//! Installed libraries' frames are passed over like torch's, but the innermost one inside
//! the user's frame is kept as the site's `via`.
//! Used by the op log for every recorded op and by the tracer (through [`Frames`]) for backward, optimizer, zero_grad and scaler call sites.

use std::sync::Arc;

use gradsleuth_capture::oplog::Callee;
use gradsleuth_capture::{Code, CodeFilter, Site};
use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use crate::Loc3;

/// Walks frames, skipping everything that is not user code (decided by
/// `gradsleuth_capture::CodeFilter`, once per code object).
pub struct FrameWalker {
    codes: FxHashMap<usize, Code>,
    pub(crate) filter: CodeFilter,
}

impl FrameWalker {
    /// `library_prefixes`: folders of Python's own library (installed packages are found by
    /// their `site-packages` folder).
    pub fn new(skip_prefixes: Vec<String>, library_prefixes: Vec<String>) -> Self {
        FrameWalker {
            codes: FxHashMap::default(),
            filter: CodeFilter::new(skip_prefixes).with_libraries(library_prefixes),
        }
    }

    fn code_info(&mut self, code: &Bound<'_, PyAny>) -> Code {
        let key = code.as_ptr() as usize;
        if let Some(e) = self.codes.get(&key) {
            return e.clone();
        }
        let file: String = code
            .getattr("co_filename")
            .and_then(|f| f.extract())
            .unwrap_or_default();
        // Read once per code object (cached below), so the name is read even for skipped code.
        let func: String = code
            .getattr("co_qualname")
            .or_else(|_| code.getattr("co_name"))
            .and_then(|f| f.extract())
            .unwrap_or_default();
        let info = self.filter.classify(&file, &func);
        self.codes.insert(key, info.clone());
        info
    }

    /// Whether code in `file` is the user's own (not skipped, not a library's).
    pub fn is_users(&self, file: &str) -> bool {
        matches!(self.filter.classify(file, ""), Code::User(..))
    }

    /// Up to `depth` user frames from `frame` outwards, innermost first, each with its frame.
    /// The first carries the innermost library frame inside it as [`Site::via`]; when no user
    /// frame calls the code at all (a library's own thread), that library frame is the site.
    pub fn walk<'py>(
        &mut self,
        frame: Bound<'py, PyAny>,
        depth: usize,
    ) -> Vec<(Site, Bound<'py, PyAny>)> {
        let py = frame.py();
        let mut out: Vec<(Site, Bound<'py, PyAny>)> = Vec::new();
        let mut library: Option<(Site, Bound<'py, PyAny>)> = None;
        let mut frame = frame;
        for _ in 0..200 {
            if frame.is_none() || out.len() >= depth {
                break;
            }
            let Ok(code) = frame.getattr(pyo3::intern!(py, "f_code")) else {
                break;
            };
            let line = || -> u32 {
                frame
                    .getattr(pyo3::intern!(py, "f_lineno"))
                    .and_then(|l| l.extract())
                    .unwrap_or(0)
            };
            match self.code_info(&code) {
                Code::Skip => {}
                Code::Library(file, function) => {
                    if out.is_empty() && library.is_none() {
                        let site = Site {
                            file,
                            line: line(),
                            function,
                            via: None,
                        };
                        library = Some((site, frame.clone()));
                    }
                }
                Code::User(file, function) => {
                    let via = match out.is_empty() {
                        true => library.as_ref().map(|(s, _)| Arc::new(s.clone())),
                        false => None,
                    };
                    let site = Site {
                        file,
                        line: line(),
                        function,
                        via,
                    };
                    out.push((site, frame.clone()));
                }
            }
            match frame.getattr(pyo3::intern!(py, "f_back")) {
                Ok(f) => frame = f,
                Err(_) => break,
            }
        }
        if out.is_empty() {
            out.extend(library);
        }
        out
    }

    /// The call the innermost user frame at or above `frame` is making
    /// ([`gradsleuth_capture::oplog::Host::callee`]); None when `frame` is the user's.
    pub fn callee<'py>(&mut self, frame: Bound<'py, PyAny>) -> Option<Callee> {
        let py = frame.py();
        // Frames of torch's and libraries' code inside the user's, innermost first.
        let mut inner: Vec<Bound<'py, PyAny>> = Vec::new();
        let mut frame = frame;
        let mut user = false;
        for _ in 0..200 {
            if frame.is_none() {
                return None;
            }
            let code = frame.getattr(pyo3::intern!(py, "f_code")).ok()?;
            if matches!(self.code_info(&code), Code::User(..)) {
                user = true;
                break;
            }
            let back = frame.getattr(pyo3::intern!(py, "f_back")).ok()?;
            inner.push(frame);
            frame = back;
        }
        // No user frame within reach: no call of the user's to name.
        let outer = inner.last().filter(|_| user)?;
        let code_of = |f: &Bound<'py, PyAny>| f.getattr(pyo3::intern!(py, "f_code")).ok();
        let id = (outer.as_ptr() as usize, code_of(outer)?.as_ptr() as usize);
        let names: Vec<(String, String)> = inner
            .iter()
            .rev()
            .filter_map(|f| {
                let code = code_of(f)?;
                let file: String = code.getattr("co_filename").ok()?.extract().ok()?;
                let name: String = code
                    .getattr("co_qualname")
                    .or_else(|_| code.getattr("co_name"))
                    .ok()?
                    .extract()
                    .ok()?;
                Some((file, name))
            })
            .collect();
        let own = own_dir(py);
        let shown = names
            .iter()
            .find(|(file, name)| {
                !is_wrapper(file, name) && !own.is_some_and(|d| file.starts_with(d))
            })
            .or(names.first())?;
        Some(Callee {
            id,
            name: shown.1.clone(),
            decorated: names.iter().any(|(file, _)| is_decorator(file)),
        })
    }
}

/// Code that only passes a call on: a decorator's (`torch.no_grad()` on a function,
/// `functools.wraps`), a context manager's, `Module.__call__`'s.
fn is_wrapper(file: &str, name: &str) -> bool {
    let file = file.replace('\\', "/");
    is_decorator(&file)
        || file.ends_with("/contextlib.py")
        || file.ends_with("/functools.py")
        || (file.ends_with("/torch/nn/modules/module.py")
            && (name.ends_with("_call_impl") || name.ends_with("_wrapped_call_impl")))
}

/// The folder of gradsleuth's own package: its wrappers (of `zero_grad`, `backward`, an
/// optimizer's `__init__`) pass a call on, like a decorator's code.
fn own_dir(py: Python<'_>) -> Option<&'static str> {
    static OWN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        let file: String = py
            .import("gradsleuth")
            .and_then(|m| m.getattr("__file__"))
            .and_then(|f| f.extract())
            .ok()?;
        let dir = std::path::Path::new(&file).parent()?;
        Some(format!("{}{}", dir.display(), std::path::MAIN_SEPARATOR))
    })
    .as_deref()
}

/// torch's context decorators' code (`@torch.no_grad()`, `@torch.inference_mode()`).
fn is_decorator(file: &str) -> bool {
    file.replace('\\', "/")
        .ends_with("/torch/utils/_contextlib.py")
}

/// The tracer's handle on [`FrameWalker`].
#[pyclass(module = "gradsleuth._core")]
pub struct Frames(FrameWalker);

#[pymethods]
impl Frames {
    #[new]
    #[pyo3(signature = (skip_prefixes, library_prefixes=Vec::new()))]
    fn new(skip_prefixes: Vec<String>, library_prefixes: Vec<String>) -> Self {
        Frames(FrameWalker::new(skip_prefixes, library_prefixes))
    }

    /// What the user's innermost line called, when that call reached `frame` through
    /// torch's or a library's code (`Accelerator.clip_grad_norm_` for the clipping it does
    /// inside); None when `frame` is the user's own.
    fn callee_name(&mut self, frame: Bound<'_, PyAny>) -> Option<String> {
        self.0.callee(frame).map(|c| c.name)
    }

    /// `(file, line, function)` of the innermost user frame at or above `frame`
    /// (`(None, None, None)` when there is none).
    fn site(&mut self, frame: Bound<'_, PyAny>) -> Loc3 {
        match self.0.walk(frame, 1).into_iter().next() {
            Some((s, _)) => (
                Some(s.file.to_string()),
                Some(s.line),
                Some(s.function.to_string()),
            ),
            None => (None, None, None),
        }
    }

    /// The innermost user frame at or above `frame` as `(file, line, function)`, with the file
    /// of the innermost installed library's frame inside it (the library whose code made the
    /// call) or None when the user's code made it directly.
    fn site_via(&mut self, frame: Bound<'_, PyAny>) -> (Loc3, Option<String>) {
        match self.0.walk(frame, 1).into_iter().next() {
            Some((s, _)) => {
                let via = match &s.via {
                    Some(v) => Some(v.file.to_string()),
                    None => self
                        .0
                        .filter
                        .is_library(&s.file)
                        .then(|| s.file.to_string()),
                };
                (
                    (
                        Some(s.file.to_string()),
                        Some(s.line),
                        Some(s.function.to_string()),
                    ),
                    via,
                )
            }
            None => ((None, None, None), None),
        }
    }

    /// `(file, line, function)` of the innermost frame at or above `frame` that is the user's
    /// or an installed library's (not torch's or gradsleuth's): where an op actually ran, for
    /// `watch`'s NaN origin, whose replayed forward has no user line of its own to show.
    fn inner_site(&mut self, frame: Bound<'_, PyAny>) -> Loc3 {
        match self.0.walk(frame, 1).into_iter().next() {
            Some((s, _)) => {
                let s = s.via.as_deref().unwrap_or(&s);
                (
                    Some(s.file.to_string()),
                    Some(s.line),
                    Some(s.function.to_string()),
                )
            }
            None => (None, None, None),
        }
    }

    /// Whether code in `filename` is the user's own (not skipped, not a library's): the one
    /// decision the walk makes, for the callers that hold only a file name (a traceback's).
    fn is_users(&self, filename: &str) -> bool {
        self.0.is_users(filename)
    }

    /// `(file, line, function)` of the innermost frame of the user's own code in the
    /// exception's traceback; for a syntax error, where the script fails to parse.
    fn error_site(&self, e: Bound<'_, PyAny>) -> PyResult<Loc3> {
        crate::errors::error_site(&self.0, &e)
    }

    /// The files of the exception's traceback, outermost first (library ones too).
    fn error_frames(&self, e: Bound<'_, PyAny>) -> Vec<String> {
        crate::errors::error_frames(&e)
    }

    /// For an object pickle could not serialise (named in the message): the shortest path to
    /// it from a variable of the traceback's frames, the user's own frames first, within
    /// `budget` objects (`crate::errors::pickle_holder`).
    #[pyo3(signature = (e, budget=20000))]
    fn pickle_holder(&self, e: Bound<'_, PyAny>, budget: usize) -> PyResult<Option<String>> {
        crate::errors::pickle_holder(&self.0, &e, budget)
    }

    /// The innermost user frame object at or above `frame`, or None.
    fn user_frame<'py>(&mut self, frame: Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
        self.0.walk(frame, 1).into_iter().next().map(|(_, f)| f)
    }
}
