//! Where an exception happened in the user's code, and for an object pickle could not
//! serialise, who holds it: read from the exception's traceback with the [`FrameWalker`]'s
//! decision of which file is the user's.

use std::collections::VecDeque;

use gradsleuth_capture::pickle::{is_held, Unpicklable};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyFrozenSet, PyList, PySet, PyTuple, PyType};
use rustc_hash::FxHashSet;

use crate::frames::FrameWalker;
use crate::Loc3;

static PARTIAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// Entries of one container followed by the search.
const ENTRIES: usize = 200;

/// The traceback's frames, outermost first.
fn traceback_frames<'py>(e: &Bound<'py, PyAny>) -> Vec<Bound<'py, PyAny>> {
    let py = e.py();
    let mut out = Vec::new();
    let mut tb = e.getattr(pyo3::intern!(py, "__traceback__")).ok();
    while let Some(t) = tb.filter(|t| !t.is_none()) {
        if let Ok(f) = t.getattr(pyo3::intern!(py, "tb_frame")) {
            out.push(f);
        }
        tb = t.getattr(pyo3::intern!(py, "tb_next")).ok();
    }
    out
}

fn filename(frame: &Bound<'_, PyAny>) -> String {
    let py = frame.py();
    frame
        .getattr(pyo3::intern!(py, "f_code"))
        .and_then(|c| c.getattr(pyo3::intern!(py, "co_filename")))
        .and_then(|f| f.extract())
        .unwrap_or_default()
}

/// `(file, line, function)` of the innermost frame of the user's own code in `e`'s traceback;
/// for a syntax error, where the script fails to parse.
pub fn error_site(walker: &FrameWalker, e: &Bound<'_, PyAny>) -> PyResult<Loc3> {
    let py = e.py();
    let mut site: Loc3 = (None, None, None);
    let mut tb = e.getattr(pyo3::intern!(py, "__traceback__")).ok();
    while let Some(t) = tb.filter(|t| !t.is_none()) {
        let code = t
            .getattr(pyo3::intern!(py, "tb_frame"))?
            .getattr(pyo3::intern!(py, "f_code"))?;
        let file: String = code.getattr(pyo3::intern!(py, "co_filename"))?.extract()?;
        if walker.is_users(&file) {
            let function: String = code
                .getattr(pyo3::intern!(py, "co_qualname"))
                .or_else(|_| code.getattr(pyo3::intern!(py, "co_name")))?
                .extract()?;
            let line: Option<u32> = t.getattr(pyo3::intern!(py, "tb_lineno"))?.extract()?;
            site = (
                Some(crate::scope::abspath(py, &file)?),
                line,
                Some(function),
            );
        }
        tb = t.getattr(pyo3::intern!(py, "tb_next")).ok();
    }
    if e.is_instance(&py.get_type::<pyo3::exceptions::PySyntaxError>())? {
        let file: Option<String> = e.getattr("filename")?.extract().unwrap_or(None);
        let line: Option<u32> = e.getattr("lineno")?.extract().unwrap_or(None);
        if let (Some(file), Some(line)) = (file.filter(|f| !f.is_empty()), line.filter(|l| *l > 0))
        {
            site = (Some(crate::scope::abspath(py, &file)?), Some(line), None);
        }
    }
    Ok(site)
}

/// The files of `e`'s traceback, outermost first (library ones too).
pub fn error_frames(e: &Bound<'_, PyAny>) -> Vec<String> {
    traceback_frames(e).iter().map(filename).collect()
}

/// For an object pickle could not serialise ([`Unpicklable`]): the shortest path to it from a
/// variable of the traceback's frames, the user's own frames first, then the libraries'
/// (gradsleuth's aside): `model.head._forward_hooks[3].__self__._fn`. At most `budget`
/// objects are looked at.
pub fn pickle_holder(
    walker: &FrameWalker,
    e: &Bound<'_, PyAny>,
    budget: usize,
) -> PyResult<Option<String>> {
    let py = e.py();
    let Some(wanted) = Unpicklable::parse(&e.str()?.to_string()) else {
        return Ok(None);
    };
    let mut frames = traceback_frames(e);
    frames.reverse(); // innermost first
    let (users, others): (Vec<_>, Vec<_>) = frames
        .into_iter()
        .map(|f| (filename(&f), f))
        .filter(|(file, _)| walker.is_users(file) || !walker.filter.in_skipped_folder(file))
        .partition(|(file, _)| walker.is_users(file));
    let mut search = Search {
        wanted,
        budget,
        seen: FxHashSet::default(),
    };
    for group in [users, others] {
        search.seen.clear();
        let mut roots = Vec::new();
        for (_, f) in group {
            for (name, value) in crate::scope::items(&f.getattr(pyo3::intern!(py, "f_locals"))?)? {
                let name: String = name.extract()?;
                if !name.starts_with("__") {
                    roots.push((name, value));
                }
            }
        }
        if let Some(path) = search.run(roots) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

struct Search {
    wanted: Unpicklable,
    budget: usize,
    seen: FxHashSet<usize>,
}

impl Search {
    /// Breadth first from `roots`: the shortest path to the wanted object that is held by
    /// something (not a root itself). Nothing the user's objects raise stops the search.
    fn run<'py>(&mut self, roots: Vec<(String, Bound<'py, PyAny>)>) -> Option<String> {
        let mut queue: VecDeque<(String, Bound<'py, PyAny>)> = roots.into();
        let mut next = VecDeque::new();
        while !queue.is_empty() && self.budget > 0 {
            while let Some((path, obj)) = queue.pop_front() {
                self.budget = self.budget.saturating_sub(1);
                if is_leaf(&obj) {
                    continue;
                }
                if self.found(&obj) && is_held(&path) {
                    return Some(path);
                }
                if !self.seen.insert(obj.as_ptr() as usize) {
                    continue;
                }
                let _ = children(&path, &obj, &mut next);
            }
            std::mem::swap(&mut queue, &mut next);
        }
        None
    }

    fn found(&self, obj: &Bound<'_, PyAny>) -> bool {
        let py = obj.py();
        let ty = obj.get_type();
        let attr = |o: &Bound<'_, PyAny>, name| -> Option<String> {
            o.getattr(name).ok().and_then(|v| v.extract().ok())
        };
        let qualname = attr(obj, pyo3::intern!(py, "__qualname__"));
        self.wanted.is(
            obj.is_callable(),
            qualname.as_deref(),
            || obj.repr().ok().map(|r| r.to_string()),
            &attr(ty.as_any(), pyo3::intern!(py, "__module__")).unwrap_or_default(),
            &attr(ty.as_any(), pyo3::intern!(py, "__qualname__")).unwrap_or_default(),
        )
    }
}

/// Values that hold nothing the search follows: classes, modules, strings, numbers.
fn is_leaf(obj: &Bound<'_, PyAny>) -> bool {
    use pyo3::types::{PyBytes, PyFloat, PyInt, PyModule, PyString, PyType};
    obj.is_instance_of::<PyType>()
        || obj.is_instance_of::<PyModule>()
        || obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyInt>()
        || obj.is_instance_of::<PyFloat>()
}

/// What `obj` holds, each with its path: a container's entries (the first 200), a bound
/// method's `__self__`, a function's closure cells, a `functools.partial`'s function and
/// arguments, an object's attributes (a module's submodules, parameters and buffers by name).
fn children<'py>(
    path: &str,
    obj: &Bound<'py, PyAny>,
    out: &mut VecDeque<(String, Bound<'py, PyAny>)>,
) -> PyResult<()> {
    let py = obj.py();
    let is_function = crate::scope::is_function(obj)?;
    if let Ok(d) = obj.cast::<PyDict>() {
        for (k, v) in d
            .items()
            .iter()
            .take(ENTRIES)
            .filter_map(|kv| kv.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>().ok())
        {
            out.push_back((format!("{path}[{}]", k.repr()?), v));
        }
    } else if obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<PyTuple>()
        || obj.is_instance_of::<PySet>()
        || obj.is_instance_of::<PyFrozenSet>()
    {
        for (i, v) in obj.try_iter()?.take(ENTRIES).enumerate() {
            out.push_back((format!("{path}[{i}]"), v?));
        }
    } else if crate::scope::is_method(obj)? {
        out.push_back((format!("{path}.__self__"), obj.getattr("__self__")?));
    } else if is_function {
        let code = obj.getattr("__code__")?;
        let names: Vec<String> = code.getattr("co_freevars")?.extract()?;
        let closure = obj.getattr("__closure__")?;
        if !closure.is_none() {
            for (name, cell) in names.into_iter().zip(closure.try_iter()?) {
                // An empty cell has no contents.
                if let Ok(v) = cell?.getattr("cell_contents") {
                    out.push_back((format!("{path}.<{name}>"), v));
                }
            }
        }
    } else if obj.is_instance(PARTIAL.import(py, "functools", "partial")?)? {
        out.push_back((format!("{path}.func"), obj.getattr("func")?));
        out.push_back((format!("{path}.args"), obj.getattr("args")?));
    }
    if is_function {
        return Ok(());
    }
    let Ok(d) = obj.getattr("__dict__") else {
        return Ok(());
    };
    let Ok(d) = d.cast::<PyDict>() else {
        return Ok(());
    };
    for (k, v) in d
        .items()
        .iter()
        .filter_map(|kv| kv.extract::<(String, Bound<'_, PyAny>)>().ok())
    {
        match v.cast::<PyDict>() {
            // A module's submodules, parameters, buffers.
            Ok(inner) if matches!(k.as_str(), "_modules" | "_parameters" | "_buffers") => {
                for (name, child) in inner
                    .items()
                    .iter()
                    .filter_map(|kv| kv.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>().ok())
                {
                    out.push_back((format!("{path}.{}", name.str()?), child));
                }
            }
            _ => out.push_back((format!("{path}.{k}"), v)),
        }
    }
    Ok(())
}
