//! Which rules run: `--select`/`--ignore` and `[tool.gradsleuth]` in `pyproject.toml`, and the
//! `# noqa` comments that silence one line.
//!
//! A selector is a code or a code prefix (`GS316`, `GS31`, `GS3`) or a category name
//! (`detach`, `optimizer_missing`). `ignore` wins over `select`; an empty `select` means all.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The `[tool.gradsleuth]` table (and the same options from the command line).
#[derive(Debug, Default, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LintConfig {
    #[serde(default)]
    pub select: Vec<String>,
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Glob-free path prefixes (relative to the pyproject folder) not to check.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// `error`, `warning` or `never`, as `--fail-on`.
    #[serde(default)]
    pub fail_on: Option<String>,
}

#[derive(Deserialize)]
struct PyProject {
    tool: Option<Tools>,
}

#[derive(Deserialize)]
struct Tools {
    gradsleuth: Option<toml::Value>,
}

fn matches(selector: &str, code: &str, category: &str) -> bool {
    let s = selector.trim();
    !s.is_empty() && (code.starts_with(&s.to_ascii_uppercase()) || s == category)
}

impl LintConfig {
    /// Is a finding with this code and category reported?
    pub fn enabled(&self, code: &str, category: &str) -> bool {
        if code == "GS300" {
            return true; // "file not checked" is never silenced
        }
        let selected =
            self.select.is_empty() || self.select.iter().any(|s| matches(s, code, category));
        selected && !self.ignore.iter().any(|s| matches(s, code, category))
    }

    /// Reads `[tool.gradsleuth]` from the first `pyproject.toml` in `start` or a folder above
    /// it that has one. `Ok(None)`: no such table.
    pub fn discover(start: &Path) -> Result<Option<(PathBuf, LintConfig)>, String> {
        let start = std::fs::canonicalize(start).unwrap_or_else(|_| start.to_path_buf());
        let first = if start.is_file() {
            start.parent().map(Path::to_path_buf)
        } else {
            Some(start)
        };
        let mut dir = first;
        while let Some(d) = dir {
            let candidate = d.join("pyproject.toml");
            if candidate.is_file() {
                if let Some(cfg) = Self::from_pyproject(&candidate)? {
                    return Ok(Some((candidate, cfg)));
                }
            }
            dir = d.parent().map(Path::to_path_buf);
        }
        Ok(None)
    }

    /// The `[tool.gradsleuth]` table of one file, if it has one.
    pub fn from_pyproject(path: &Path) -> Result<Option<LintConfig>, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let doc: PyProject =
            toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message()))?;
        let Some(table) = doc.tool.and_then(|t| t.gradsleuth) else {
            return Ok(None);
        };
        table.try_into().map(Some).map_err(|e: toml::de::Error| {
            format!("{}: [tool.gradsleuth]: {}", path.display(), e.message())
        })
    }
}

/// Does a `# noqa` comment on this line silence `code`? `# noqa` alone silences every rule;
/// `# noqa: GS301, GS316` only those (prefixes allowed, as in ruff).
pub fn noqa(line: &str, code: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    let Some(at) = lower.find("# noqa") else {
        return false;
    };
    let rest = line[at + "# noqa".len()..].trim_start();
    let Some(list) = rest.strip_prefix(':') else {
        // Bare `# noqa` (or followed by prose).
        return true;
    };
    list.split(|c: char| c == ',' || c.is_whitespace())
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .take_while(|c| c.chars().next().is_some_and(|ch| ch.is_ascii_alphabetic()))
        .any(|c| code.starts_with(&c.to_ascii_uppercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_and_ignore_by_code_prefix_and_category() {
        let cfg = LintConfig {
            select: vec!["GS31".into(), "unregistered".into()],
            ignore: vec!["GS316".into()],
            ..Default::default()
        };
        assert!(cfg.enabled("GS317", "numpy_roundtrip"));
        assert!(cfg.enabled("GS301", "unregistered"));
        assert!(!cfg.enabled("GS316", "detach"));
        assert!(!cfg.enabled("GS302", "non_leaf_param"));
        assert!(cfg.enabled("GS300", "other"));
        assert!(LintConfig::default().enabled("GS316", "detach"));
    }

    #[test]
    fn noqa_forms() {
        assert!(noqa("x = 1  # noqa", "GS301"));
        assert!(noqa("x = 1  # NOQA: GS301", "GS301"));
        assert!(noqa("x = 1  # noqa: GS316, GS301 because", "GS301"));
        assert!(noqa("x = 1  # noqa:GS3", "GS322"));
        assert!(!noqa("x = 1  # noqa: GS316", "GS301"));
        assert!(!noqa("x = 1  # no qa", "GS301"));
        assert!(!noqa("x = 1", "GS301"));
    }

    #[test]
    fn reads_pyproject_tables() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pyproject.toml");
        std::fs::write(
            &p,
            "[project]\nname = 'x'\n[tool.gradsleuth]\nignore = ['GS316']\nexclude = ['vendor']\n",
        )
        .unwrap();
        let sub = dir.path().join("src");
        std::fs::create_dir(&sub).unwrap();
        let (found, cfg) = LintConfig::discover(&sub).unwrap().unwrap();
        assert_eq!(found.file_name().unwrap(), "pyproject.toml");
        assert_eq!(cfg.ignore, vec!["GS316"]);
        std::fs::write(&p, "[tool.gradsleuth]\nselct = ['GS3']\n").unwrap();
        let err = LintConfig::discover(&sub).unwrap_err();
        assert!(err.contains("selct"), "{err}");
        std::fs::write(&p, "[tool.ruff]\nline-length = 100\n").unwrap();
        assert!(LintConfig::discover(&sub).unwrap().is_none());
    }
}
