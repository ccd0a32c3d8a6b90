//! What `gradsleuth run` tells the interpreter it starts (every rank's, under a launcher):
//! one typed, versioned JSON file whose path is the only environment variable the child
//! reads (`GRADSLEUTH_RUN_CONFIG`). The bootstrap loads it through `_core.RunConfig`.

use serde::{Deserialize, Serialize};

/// The environment variable holding the run configuration's path.
pub const RUN_CONFIG_ENV: &str = "GRADSLEUTH_RUN_CONFIG";

/// The version of [`RunConfig`] this build writes and reads.
pub const RUN_CONFIG_VERSION: u32 = 1;

/// `gradsleuth run`'s options, as the traced interpreter needs them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub version: u32,
    /// Where the capture is written; `{rank}` is replaced by the process's rank.
    pub capture: Option<String>,
    /// Training steps observed (optimizer steps, or backward calls without an optimizer).
    pub steps: u32,
    /// End the script once the observed steps are done.
    pub stop_after: bool,
    /// Op-level capture in every observed step.
    pub deep: bool,
    /// Keep the watch monitor on for the whole run.
    pub watch: bool,
    /// TensorBoard event files go here (absolute).
    pub tensorboard: Option<String>,
    /// When another program starts the job (`gradsleuth run -- accelerate launch ...
    /// train.py`): the training script (absolute). Every interpreter of the job whose main
    /// script is this file starts the tracer itself (the bootstrap's `sitecustomize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// The same for a job whose interpreters run a module (`python -m pkg.train` under the
    /// launcher): every interpreter started with `-m` this module starts the tracer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// Where an interpreter that will not trace (its torch is older than the tracer supports)
    /// writes why, so `gradsleuth run` says that instead of reporting an empty run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Record what `gradsleuth bisect` compares across environments: each loss's value and a
    /// digest of every op's outputs in the op-level step (host reads the normal run avoids).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub probe: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            version: RUN_CONFIG_VERSION,
            capture: None,
            steps: 3,
            stop_after: false,
            deep: false,
            watch: false,
            tensorboard: None,
            script: None,
            module: None,
            refusal: None,
            probe: false,
        }
    }
}

impl RunConfig {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }

    /// Reads a configuration, refusing another version or unknown fields.
    pub fn from_json(text: &str) -> Result<RunConfig, String> {
        // The version first: another version's fields are not this one's to judge.
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let version = value.get("version").and_then(|v| v.as_u64());
        if version != Some(u64::from(RUN_CONFIG_VERSION)) {
            let v = version.map_or("missing".to_owned(), |v| v.to_string());
            return Err(format!(
                "run configuration version {v} (this gradsleuth reads {RUN_CONFIG_VERSION})"
            ));
        }
        serde_json::from_value(value).map_err(|e| e.to_string())
    }
}

/// The module an interpreter's command line (`sys.orig_argv`) runs with `-m`, None for a
/// script or `-c`.
pub fn dash_m(argv: &[String]) -> Option<&str> {
    let mut args = argv.iter().skip(1);
    while let Some(a) = args.next() {
        if a == "-m" {
            return args.next().map(String::as_str);
        }
        if let Some(m) = a.strip_prefix("-m") {
            return Some(m);
        }
        if a == "-W" || a == "-X" {
            args.next();
        } else if a == "-c" || !a.starts_with('-') {
            return None;
        }
    }
    None
}

/// Whether an interpreter of the job runs its training program, and if so how the capture
/// names it: `-m NAME` when the job runs a module (`module`) and this interpreter was started
/// with `-m NAME` (`orig_argv`); the main script `argv0` when it is the job's `script` file
/// (`same_file` compares two paths as files). None for any other interpreter of the job (the
/// launcher's own, a data worker's).
pub fn traced_main(
    module: Option<&str>,
    script: Option<&str>,
    argv0: &str,
    orig_argv: &[String],
    same_file: impl Fn(&str, &str) -> bool,
) -> Option<String> {
    if let Some(m) = module.filter(|m| !m.is_empty()) {
        // `python -m NAME`: `sys.argv[0]` is still "-m" while site-packages are imported.
        return (dash_m(orig_argv) == Some(m)).then(|| format!("-m {m}"));
    }
    let script = script.filter(|s| !s.is_empty())?;
    if argv0.is_empty() || argv0.starts_with('-') || !same_file(argv0, script) {
        return None;
    }
    Some(argv0.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_does_not_know() {
        let c = RunConfig {
            capture: Some("/tmp/x/rank{rank}.json".into()),
            steps: 5,
            watch: true,
            ..Default::default()
        };
        assert_eq!(RunConfig::from_json(&c.to_json()).unwrap(), c);
        let other = c.to_json().replace("\"version\": 1", "\"version\": 9");
        assert!(RunConfig::from_json(&other)
            .unwrap_err()
            .contains("version 9"));
        let extra = c.to_json().replacen('{', "{\"colour\": true,", 1);
        assert!(RunConfig::from_json(&extra).is_err());
    }

    #[test]
    fn the_interpreter_running_the_training_program_is_found_among_the_jobs() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            dash_m(&argv(&["python", "-m", "pkg.train", "--lr", "1"])),
            Some("pkg.train")
        );
        assert_eq!(
            dash_m(&argv(&["python", "-X", "dev", "-mpkg.train"])),
            Some("pkg.train")
        );
        assert_eq!(
            dash_m(&argv(&["python", "-W", "ignore", "-u", "-m", "x"])),
            Some("x")
        );
        assert_eq!(dash_m(&argv(&["python", "train.py", "-m", "x"])), None);
        assert_eq!(dash_m(&argv(&["python", "-c", "import x"])), None);
        let same = |a: &str, b: &str| a.trim_start_matches("./") == b.trim_start_matches("/job/");
        let run = |module, script, argv0, orig: &[&str]| {
            traced_main(module, script, argv0, &argv(orig), same)
        };
        assert_eq!(
            run(
                Some("pkg.train"),
                None,
                "-m",
                &["python", "-m", "pkg.train"]
            )
            .as_deref(),
            Some("-m pkg.train")
        );
        assert_eq!(
            run(Some("pkg.train"), None, "-m", &["python", "-m", "other"]),
            None
        );
        assert_eq!(
            run(None, Some("/job/train.py"), "./train.py", &[]).as_deref(),
            Some("./train.py")
        );
        assert_eq!(
            run(None, Some("/job/train.py"), "launch.py", &[]),
            None,
            "the launcher's own"
        );
        assert_eq!(run(None, Some("/job/train.py"), "-c", &[]), None);
        assert_eq!(run(None, None, "train.py", &[]), None);
    }
}
