//! The user's own frames: the one place gradsleuth decides which Python frame is "user code".
//!
//! Frames of torch, of gradsleuth, of `<frozen ...>`/`<string>` code and of the stdlib modules
//! that only forward calls (`runpy`, `contextlib`, `functools`) are skipped. What a code
//! object is (skipped, or its absolute file and qualified name) is cached by its address, so a
//! walk costs a few attribute reads per frame. Used by the op log for every recorded op and by
//! the tracer (through [`Frames`]) for backward, optimizer, zero_grad and scaler call sites.

use std::sync::Arc;

use pyo3::prelude::*;
use rustc_hash::FxHashMap;

/// (absolute file, qualname) of a user code object.
type CodeInfo = (Arc<str>, Arc<str>);

/// Stdlib modules whose frames only forward calls.
const FORWARDING: &[&str] = &["runpy.py", "contextlib.py", "functools.py"];

/// A user frame: file, line, function.
#[derive(Clone)]
pub struct Site {
    pub file: Arc<str>,
    pub line: u32,
    pub function: Arc<str>,
}

/// Walks frames, skipping everything that is not user code.
pub struct FrameWalker {
    codes: FxHashMap<usize, Option<CodeInfo>>,
    skip_prefixes: Vec<String>,
}

impl FrameWalker {
    pub fn new(skip_prefixes: Vec<String>) -> Self {
        FrameWalker {
            codes: FxHashMap::default(),
            skip_prefixes,
        }
    }

    fn code_info(&mut self, code: &Bound<'_, PyAny>) -> Option<CodeInfo> {
        let key = code.as_ptr() as usize;
        if let Some(e) = self.codes.get(&key) {
            return e.clone();
        }
        let file: String = code
            .getattr("co_filename")
            .and_then(|f| f.extract())
            .unwrap_or_default();
        let base = std::path::Path::new(&file)
            .file_name()
            .and_then(|b| b.to_str())
            .unwrap_or("");
        let skip = file.starts_with('<')
            || FORWARDING.contains(&base)
            || self
                .skip_prefixes
                .iter()
                .any(|p| file.starts_with(p.as_str()));
        let info = if skip {
            None
        } else {
            let func: String = code
                .getattr("co_qualname")
                .or_else(|_| code.getattr("co_name"))
                .and_then(|f| f.extract())
                .unwrap_or_default();
            let path = std::path::Path::new(&file);
            let file = if path.is_absolute() {
                file
            } else {
                std::env::current_dir()
                    .map(|d| d.join(path).to_string_lossy().into_owned())
                    .unwrap_or(file)
            };
            Some((Arc::<str>::from(file), Arc::<str>::from(func)))
        };
        self.codes.insert(key, info.clone());
        info
    }

    /// Up to `depth` user frames from `frame` outwards, innermost first, each with its frame.
    pub fn walk<'py>(
        &mut self,
        frame: Bound<'py, PyAny>,
        depth: usize,
    ) -> Vec<(Site, Bound<'py, PyAny>)> {
        let py = frame.py();
        let mut out = Vec::new();
        let mut frame = frame;
        for _ in 0..200 {
            if frame.is_none() || out.len() >= depth {
                break;
            }
            let Ok(code) = frame.getattr(pyo3::intern!(py, "f_code")) else {
                break;
            };
            if let Some((file, function)) = self.code_info(&code) {
                let line: u32 = frame
                    .getattr(pyo3::intern!(py, "f_lineno"))
                    .and_then(|l| l.extract())
                    .unwrap_or(0);
                out.push((
                    Site {
                        file,
                        line,
                        function,
                    },
                    frame.clone(),
                ));
            }
            match frame.getattr(pyo3::intern!(py, "f_back")) {
                Ok(f) => frame = f,
                Err(_) => break,
            }
        }
        out
    }
}

/// The tracer's handle on [`FrameWalker`].
#[pyclass(module = "gradsleuth._core")]
pub struct Frames(FrameWalker);

#[pymethods]
impl Frames {
    #[new]
    fn new(skip_prefixes: Vec<String>) -> Self {
        Frames(FrameWalker::new(skip_prefixes))
    }

    /// `(file, line, function)` of the innermost user frame at or above `frame`
    /// (`(None, None, None)` when there is none).
    fn site(&mut self, frame: Bound<'_, PyAny>) -> (Option<String>, Option<u32>, Option<String>) {
        match self.0.walk(frame, 1).into_iter().next() {
            Some((s, _)) => (
                Some(s.file.to_string()),
                Some(s.line),
                Some(s.function.to_string()),
            ),
            None => (None, None, None),
        }
    }

    /// The innermost user frame object at or above `frame`, or None.
    fn user_frame<'py>(&mut self, frame: Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
        self.0.walk(frame, 1).into_iter().next().map(|(_, f)| f)
    }
}
