//! The files of a bug report, filled from the finding: `repro.py` (the reduced program, with a
//! check that prints the symptom and asserts it when the finding names parameters that get no
//! gradient), `test_repro.py` (fails while the bug exists), `bench_repro.py` (a
//! `torch.utils.benchmark` timing of one run), `ENVIRONMENT.md` and `ISSUE.md` (Problem · Root
//! cause · Fix · Test · Performance).

use gradsleuth_model::Finding;

use crate::target::Target;

/// What the kit is made from.
pub struct Kit<'a> {
    pub target: &'a Target,
    /// The finding as the reduced program's run reports it (its line, its fix).
    pub finding: Option<&'a Finding>,
    /// The reduced program.
    pub program: &'a str,
    pub original: &'a str,
    pub original_lines: usize,
    pub program_lines: usize,
    pub seconds: f64,
    pub checks: u32,
    pub environment: &'a [(String, String)],
    /// Whether `repro.py` asserts the symptom itself (the trailer held when it was run).
    pub asserts_symptom: bool,
}

/// Python that finds the named parameters among the program's models and asserts that none
/// of them received a gradient: `before` goes after the program's docstring and `__future__`
/// imports (a global forward pre-hook keeps every module the program calls, so a model local
/// to `main()` is still there at the end; it uses the `_torch` that [`seed`] binds before it),
/// `after` at its end. A name the models do not give as it is matches one that ends with it, or
/// that it ends with (the model reached through a wrapper the program no longer keeps, such as
/// a LightningModule passed straight to `fit`). Kept only if it holds when run.
pub struct Symptom {
    pub before: String,
    pub after: String,
}

pub fn symptom_check(params: &[String]) -> Symptom {
    let names: Vec<String> = params.iter().map(|p| format!("{p:?}")).collect();
    Symptom {
        before: r#"# --- gradsleuth repro: keep the models the program calls, for the check at the end ---
_called = {}
_torch.nn.modules.module.register_module_forward_pre_hook(lambda m, _a: _called.__setitem__(id(m), m))
"#
        .to_owned(),
        after: format!(
            r#"
# --- the symptom (gradsleuth repro) ---
_mods = list(_called.values()) + [v for v in list(globals().values()) if isinstance(v, _torch.nn.Module)]
_inner = {{id(s) for m in _mods for s in m.modules() if s is not m}}
_seen = {{n: p for m in _mods if id(m) not in _inner for n, p in m.named_parameters()}}
_named = {{{names}}}
_find = lambda n: _seen[n] if n in _seen else next((p for k, p in _seen.items() if n.endswith("." + k) or k.endswith("." + n)), None)
_stuck = sorted(n for n in _named if (_p := _find(n)) is not None and (_p.grad is None or not bool(_p.grad.any())))
print("no gradient reached:", ", ".join(_stuck) or "(every named parameter got one)")
assert _stuck, "the symptom is gone: every named parameter received a gradient"
"#,
            names = names.join(", ")
        ),
    }
}

/// The seeding every run of the reduction had (`gradsleuth._oracle` seeds torch's, Python's and
/// numpy's generators with 0 before a candidate starts): a program whose symptom depends on a
/// random draw shows it in `repro.py` as it did to the reducer. Python's and numpy's only
/// when the program imports them (torch does not need numpy). Binds `_torch`, which the
/// symptom check uses.
pub fn seed(program: &str) -> String {
    let imports = |m: &str| {
        program.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with(&format!("import {m}")) || l.starts_with(&format!("from {m} import"))
        })
    };
    let mut s = String::from(
        "# --- gradsleuth repro: seeded as every run of the reduction was ---\nimport torch as _torch\n_torch.manual_seed(0)\n",
    );
    if imports("random") {
        s.push_str("__import__(\"random\").seed(0)\n");
    }
    if imports("numpy") {
        s.push_str("__import__(\"numpy\").random.seed(0)\n");
    }
    s
}

impl Kit<'_> {
    pub fn repro_py(&self, check: Option<&Symptom>) -> String {
        let mut s = format!(
            "# Minimal reproduction of gradsleuth {} ({}): {}\n# Reduced from {} ({} lines) to {} lines by `gradsleuth repro`.\n",
            self.target.code,
            self.target.category,
            self.target.message,
            self.original,
            self.original_lines,
            self.program_lines
        );
        let at = crate::data::prelude_end(self.program).unwrap_or(0);
        s.push_str(&self.program[..at]);
        s.push_str(&seed(self.program));
        if let Some(c) = check {
            s.push_str(&c.before);
        }
        s.push_str(&self.program[at..]);
        if let Some(c) = check {
            s.push_str(&c.after);
        }
        s
    }

    pub fn test_py(&self) -> String {
        format!(
            r#""""Fails while the bug exists: gradsleuth still reports {code} ({category}) on repro.py."""

import json
import pathlib
import subprocess
import sys


def test_repro_no_longer_shows_{name}(tmp_path):
    out = tmp_path / "report.json"
    repro = pathlib.Path(__file__).with_name("repro.py")
    subprocess.run(
        [sys.executable, "-m", "gradsleuth", "run", "--format", "json", "--out", str(out),
         "--fail-on", "never", str(repro)],
        check=True,
    )
    codes = [f["code"] for f in json.loads(out.read_text())["findings"]]
    assert "{code}" not in codes, "{message}"
"#,
            code = self.target.code,
            category = self.target.category,
            name = self.target.category,
            message = self
                .target
                .message
                .replace('\\', "\\\\")
                .replace('"', "\\\""),
        )
    }

    pub fn bench_py(&self) -> String {
        r#""""Times one run of repro.py with torch.utils.benchmark (for performance issues)."""

import pathlib

import torch.utils.benchmark as benchmark

path = pathlib.Path(__file__).with_name("repro.py")
code = compile(path.read_text(), str(path), "exec")
timer = benchmark.Timer(stmt="exec(code, {'__name__': '__main__'})", globals={"code": code})
print(timer.blocked_autorange(min_run_time=1.0))
"#
        .to_owned()
    }

    pub fn environment_md(&self) -> String {
        let mut s = String::from("| | |\n| --- | --- |\n");
        for (k, v) in self.environment {
            s.push_str(&format!("| {k} | {v} |\n"));
        }
        s
    }

    pub fn issue_md(&self) -> String {
        let rule = gradsleuth_rules::rule(&self.target.code);
        let title = rule.map_or(self.target.category.clone(), |r| r.pitfall.title.clone());
        let mut s = format!("### {title}: {}\n\n", self.target.message);
        s.push_str(&format!(
            "**Problem.** gradsleuth reports {} ({}): {}",
            self.target.code, self.target.category, self.target.message
        ));
        // The finding's own file: the bug may sit in a model file the kit carries beside
        // repro.py.
        if let Some(loc) = self.finding.and_then(|f| f.location.as_ref()) {
            let file = std::path::Path::new(&loc.file)
                .file_name()
                .map_or(loc.file.as_str(), |n| n.to_str().unwrap_or("repro.py"));
            let code = loc
                .snippet
                .as_deref()
                .and_then(|t| t.lines().map(str::trim).find(|l| !l.is_empty()))
                .map(|l| format!(": `{l}`"))
                .unwrap_or_default();
            s.push_str(&format!(" (`{file}` line {}{code})", loc.line));
        }
        s.push_str(".\n\n");
        if let Some(r) = rule {
            s.push_str(&format!("**Root cause.** {}\n\n", r.pitfall.why.trim()));
        }
        let fix = self
            .finding
            .and_then(|f| f.fix.clone())
            .or_else(|| rule.map(|r| r.pitfall.fix.trim().to_owned()));
        if let Some(fix) = fix {
            s.push_str(&format!("**Fix.** {fix}\n\n"));
        }
        s.push_str(&format!(
            "**Test.** `pytest test_repro.py` fails while the bug exists (gradsleuth still reports {} on `repro.py`){}.\n\n",
            self.target.code,
            if self.asserts_symptom {
                "; `python repro.py` prints the parameters no gradient reached and asserts it"
            } else {
                ""
            }
        ));
        s.push_str("**Performance.** `python bench_repro.py` times one run with `torch.utils.benchmark`.\n\n");
        s.push_str(&format!(
            "**Reproduce.** `python repro.py`: {} lines, reduced from `{}` ({} lines) by `gradsleuth repro` in {:.0} s ({} runs).\n\n",
            self.program_lines, self.original, self.original_lines, self.seconds, self.checks
        ));
        s.push_str("**Environment.**\n\n");
        s.push_str(&self.environment_md());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kit_is_filled_from_the_finding_and_its_rule() {
        let target = Target {
            code: "GS201".into(),
            category: "detach".into(),
            roles: vec!["head.weight".into()],
            message: "`.detach()` cuts `head` off the loss".into(),
        };
        let env = vec![("torch".to_owned(), "2.15.0".to_owned())];
        let kit = Kit {
            target: &target,
            finding: None,
            program: "import torch\n",
            original: "train.py",
            original_lines: 120,
            program_lines: 9,
            seconds: 31.0,
            checks: 40,
            environment: &env,
            asserts_symptom: true,
        };
        let issue = kit.issue_md();
        for part in [
            "**Problem.** gradsleuth reports GS201",
            "**Root cause.**",
            "**Fix.**",
            "**Test.**",
            "**Performance.**",
            "| torch | 2.15.0 |",
            "9 lines, reduced from `train.py` (120 lines)",
        ] {
            assert!(issue.contains(part), "{part}:\n{issue}");
        }
        assert!(kit.test_py().contains("assert \"GS201\" not in codes"));
        // The finding's line is given in its own file (a model file beside repro.py).
        let mut finding =
            gradsleuth_rules::registered("GS201").finding(gradsleuth_model::Severity::Error, "cut");
        finding.location = Some(gradsleuth_model::Location {
            snippet: Some("        x = x.detach()\n".into()),
            ..gradsleuth_model::Location::new("/tmp/kit/modeling_bert.py", 117)
        });
        let with_line = Kit {
            finding: Some(&finding),
            ..kit
        };
        assert!(
            with_line
                .issue_md()
                .contains("(`modeling_bert.py` line 117: `x = x.detach()`)"),
            "{}",
            with_line.issue_md()
        );
        let check = symptom_check(&["head.weight".to_owned()]);
        assert!(
            check.after.contains("_named = {\"head.weight\"}"),
            "{}",
            check.after
        );
        assert!(kit
            .repro_py(Some(&check))
            .starts_with("# Minimal reproduction of gradsleuth GS201 (detach)"));
    }

    #[test]
    fn the_symptom_hook_goes_after_the_docstring_and_future_imports() {
        let target = Target {
            code: "GS201".into(),
            category: "detach".into(),
            roles: vec![],
            message: String::new(),
        };
        let program = "\"\"\"Doc.\"\"\"\nfrom __future__ import annotations\n\nimport torch\n\n\ndef main():\n    pass\n";
        let kit = Kit {
            target: &target,
            finding: None,
            program,
            original: "train.py",
            original_lines: 9,
            program_lines: 5,
            seconds: 1.0,
            checks: 1,
            environment: &[],
            asserts_symptom: false,
        };
        let text = kit.repro_py(Some(&symptom_check(&["w".to_owned()])));
        let future = text.find("from __future__").unwrap();
        let hook = text.find("register_module_forward_pre_hook").unwrap();
        let body = text.find("import torch\n\n\ndef main").unwrap();
        assert!(future < hook && hook < body, "{text}");
        assert!(text.trim_end().ends_with("received a gradient\""), "{text}");
    }

    #[test]
    fn repro_py_is_seeded_as_the_reduction_was() {
        let plain = seed("import torch\nx = torch.randn(3)\n");
        assert!(plain.contains("_torch.manual_seed(0)"), "{plain}");
        assert!(
            !plain.contains("random\").seed") && !plain.contains("numpy"),
            "{plain}"
        );
        let all = seed("import random\nimport numpy as np\nimport torch\n");
        assert!(all.contains("__import__(\"random\").seed(0)"), "{all}");
        assert!(
            all.contains("__import__(\"numpy\").random.seed(0)"),
            "{all}"
        );
        let target = Target {
            code: "GS201".into(),
            category: "detach".into(),
            roles: vec![],
            message: String::new(),
        };
        let kit = Kit {
            target: &target,
            finding: None,
            program: "from __future__ import annotations\nimport torch\n",
            original: "train.py",
            original_lines: 2,
            program_lines: 2,
            seconds: 1.0,
            checks: 1,
            environment: &[],
            asserts_symptom: false,
        };
        for check in [None, Some(symptom_check(&["w".to_owned()]))] {
            let text = kit.repro_py(check.as_ref());
            let seeded = text.find("_torch.manual_seed(0)").unwrap();
            assert!(text.find("from __future__").unwrap() < seeded, "{text}");
            // Before the program's own code (its `import torch`).
            assert!(seeded < text.find("import torch\n").unwrap(), "{text}");
        }
    }
}
