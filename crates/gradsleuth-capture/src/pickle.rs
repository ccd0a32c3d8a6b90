//! What an error pickle raised names as the object it could not serialise: a local function
//! or class (`Can't pickle local object 'main.<locals>.f'`, `Can't get local object ...`), an
//! instance of an unpicklable type (`cannot pickle 'generator' object`), or a function shown
//! by its repr (`Can't pickle <function <lambda> at 0x7f...>`). The binding layer then looks
//! for the shortest path to such an object from the traceback's variables.

use std::sync::OnceLock;

use regex::Regex;

/// The object a pickling error names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unpicklable {
    /// A function or class by its qualified name (`main.<locals>.f`).
    Callable(String),
    /// An instance of the type so named (`generator`, `module.Class`).
    Instance(String),
    /// A function by its repr, address included.
    Shown(String),
}

impl Unpicklable {
    /// What `message` names, or None when it is not pickle's complaint about one object.
    pub fn parse(message: &str) -> Option<Unpicklable> {
        static COMPLAINT: OnceLock<Regex> = OnceLock::new();
        static NAMED: OnceLock<Regex> = OnceLock::new();
        static SHOWN: OnceLock<Regex> = OnceLock::new();
        let complaint = COMPLAINT.get_or_init(|| {
            Regex::new(r"(?:Can't|[Cc]annot) (?:pickle|get local object) (.+)").expect("regex")
        });
        let named = NAMED.get_or_init(|| {
            Regex::new(r"^(?:local object )?'([^']+)'(?: object)?").expect("regex")
        });
        let shown =
            SHOWN.get_or_init(|| Regex::new(r"^(<function .+? at 0x[0-9a-f]+>)").expect("regex"));
        let what = complaint.captures(message)?.get(1)?.as_str().trim();
        if let Some(n) = named.captures(what) {
            let name = n[1].to_string();
            return Some(match what.ends_with(" object") {
                true => Unpicklable::Instance(name),
                false => Unpicklable::Callable(name),
            });
        }
        shown
            .captures(what)
            .map(|s| Unpicklable::Shown(s[1].to_string()))
    }

    /// Whether an object is the one named: `callable`, its `qualname` (None without one), its
    /// `repr` when it is callable (asked only for [`Unpicklable::Shown`]), its type's module
    /// and qualified name.
    pub fn is(
        &self,
        callable: bool,
        qualname: Option<&str>,
        repr: impl FnOnce() -> Option<String>,
        type_module: &str,
        type_qualname: &str,
    ) -> bool {
        match self {
            Unpicklable::Shown(s) => callable && repr().as_deref() == Some(s.as_str()),
            Unpicklable::Instance(name) => {
                *name == format!("{type_module}.{type_qualname}") || name == type_qualname
            }
            Unpicklable::Callable(name) => callable && qualname == Some(name.as_str()),
        }
    }
}

/// Whether a path found reaches into something (`model.head`, `hooks[3]`), not a bare
/// variable: the culprit is what holds the object, and a variable holding it is no news.
pub fn is_held(path: &str) -> bool {
    path.contains('.') || path.contains('[')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_of_pickles_complaints_names_its_object() {
        use Unpicklable::*;
        let cases = [
            ("Can't pickle local object 'main.<locals>.hook'", Some(Callable("main.<locals>.hook".into()))),
            ("Can't get local object 'Net.__init__.<locals>.f'", Some(Callable("Net.__init__.<locals>.f".into()))),
            ("cannot pickle 'generator' object", Some(Instance("generator".into()))),
            ("TypeError: cannot pickle '_thread.lock' object\nmore", Some(Instance("_thread.lock".into()))),
            (
                "Can't pickle <function <lambda> at 0x7f3a2b>: attribute lookup <lambda> on __main__ failed",
                Some(Shown("<function <lambda> at 0x7f3a2b>".into())),
            ),
            ("Can't pickle 42", None),
            ("CUDA error: out of memory", None),
        ];
        for (message, want) in cases {
            assert_eq!(Unpicklable::parse(message), want, "{message}");
        }
    }

    #[test]
    fn an_object_is_matched_by_what_the_message_shows_of_it() {
        let f = Unpicklable::Callable("main.<locals>.f".into());
        assert!(f.is(
            true,
            Some("main.<locals>.f"),
            || None,
            "__main__",
            "function"
        ));
        assert!(!f.is(false, Some("main.<locals>.f"), || None, "__main__", "X"));
        let g = Unpicklable::Instance("generator".into());
        assert!(g.is(false, None, || None, "builtins", "generator"));
        let lock = Unpicklable::Instance("_thread.lock".into());
        assert!(lock.is(false, None, || None, "_thread", "lock"));
        let shown = Unpicklable::Shown("<function <lambda> at 0x1>".into());
        assert!(shown.is(
            true,
            None,
            || Some("<function <lambda> at 0x1>".into()),
            "",
            ""
        ));
        assert!(!shown.is(
            false,
            None,
            || Some("<function <lambda> at 0x1>".into()),
            "",
            ""
        ));
        assert!(is_held("model.head") && is_held("hooks[3]") && !is_held("f"));
    }
}
