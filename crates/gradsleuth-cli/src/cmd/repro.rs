//! `gradsleuth repro`: cuts a training script down to a minimal standalone program that still
//! shows the same finding, and writes the kit a bug report needs.
//!
//! Candidates run in `python -m gradsleuth._oracle`, which imports torch once and forks a
//! child per candidate (a run costs the script's own work, not torch's import); each child
//! runs the candidate as `gradsleuth run --stop-after` would and writes its capture, which is
//! analysed here. The reduction, the target finding and the kit's texts are
//! `gradsleuth-repro`'s.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use gradsleuth_model::{Capture, Report, RunConfig};
use gradsleuth_repro::kit::{symptom_check, Kit};
use gradsleuth_repro::reduce::code_lines;
use gradsleuth_repro::{reduce, Target};

use crate::CliError;

#[derive(clap::Args, Debug, Clone)]
#[command(trailing_var_arg = true)]
pub struct ReproArgs {
    /// The finding to keep (a code or a category) [default: the first error, else the first
    /// warning].
    #[arg(long, value_name = "CODE")]
    pub finding: Option<String>,
    /// Time for the whole command: the script's runs as given, the reduction, the kit's
    /// checks (the reduction stops early enough to leave them the time the first runs took);
    /// the smallest program found by then is the answer.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0)]
    pub budget: f64,
    /// Training steps each run observes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub steps: u32,
    /// End a candidate's run after SECONDS (it then counts as not showing the finding).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub timeout: f64,
    /// Folder for the kit.
    #[arg(long, value_name = "DIR", default_value = "repro")]
    pub out: PathBuf,
    /// Python interpreter [default: the one gradsleuth runs in].
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// The script and its arguments.
    #[arg(value_name = "SCRIPT [ARGS]...", allow_hyphen_values = true)]
    pub command: Vec<String>,
}

fn io(what: &str) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |e| CliError::Io(format!("{what}: {e}"))
}

/// The fork server and the folder its runs write to.
struct Oracle {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    work: PathBuf,
    args: Vec<String>,
    steps: u32,
    timeout: f64,
    runs: u32,
    /// Installed packages the server imports once before forking (sent with each request).
    preload: Vec<String>,
    /// Seconds the last kept program's run took: a candidate is cut off at
    /// [`SLOWER`] times that (plus [`SLACK`] s), and counts as not showing the finding.
    reference: Option<f64>,
    /// Seconds the last run took.
    last: f64,
    python: PathBuf,
    /// `PYTHONPATH` of a run in a new interpreter: the user's, without the script's folder.
    fresh_path: Option<std::ffi::OsString>,
    /// Candidates run to their end (the script ends soon: see [`WHOLE`]), held to the
    /// program's pace there too.
    whole: bool,
    /// The last run was cut off at its time limit.
    timed_out: bool,
}

/// A script whose whole run ends within this many seconds is run to its end by every
/// candidate, so what happens after the observed steps counts too: a candidate that drops
/// `num_labels=3` passes the first steps when they draw no label 2, and raises later.
const WHOLE: f64 = 15.0;

/// A candidate may run this many times longer than the program it reduces, plus [`SLACK`]
/// seconds: dropping `hidden_size=32` from a config shows the same finding on the class's
/// default model, a hundred times larger; a reproduction that takes a minute instead of a
/// second is not smaller in any way that matters.
const SLOWER: f64 = 3.0;
const SLACK: f64 = 2.0;

/// What one run left.
struct Outcome {
    capture: Option<Capture>,
    report: Option<Report>,
}

impl Oracle {
    fn start(
        python: &Path,
        script_dir: &Path,
        work: &Path,
        args: &ReproArgs,
    ) -> Result<Oracle, CliError> {
        let mut fresh = Vec::new();
        if let Some(pkg) = std::env::var_os("GRADSLEUTH_PACKAGE_PATH") {
            fresh.push(PathBuf::from(pkg));
        }
        if let Some(old) = std::env::var_os("PYTHONPATH") {
            fresh.extend(std::env::split_paths(&old));
        }
        let mut paths = vec![script_dir.to_path_buf()];
        paths.extend(fresh.iter().cloned());
        let log = std::fs::File::create(work.join("oracle.log"))
            .map_err(io("cannot write the oracle's log"))?;
        let mut cmd = Command::new(python);
        cmd.args(["-m", "gradsleuth._oracle"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        if let Ok(joined) = std::env::join_paths(paths) {
            cmd.env("PYTHONPATH", joined);
        }
        let mut child = cmd.spawn().map_err(|e| {
            CliError::Usage(format!(
                "cannot start {}: {e} (use --python to choose the interpreter)",
                python.display()
            ))
        })?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| CliError::Io("no pipe to the oracle".into()))?;
        let stdout = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| CliError::Io("no pipe from the oracle".into()))?,
        );
        Ok(Oracle {
            child,
            stdin,
            stdout,
            work: work.to_path_buf(),
            args: args.command[1..].to_vec(),
            steps: args.steps,
            timeout: args.timeout,
            runs: 0,
            preload: Vec::new(),
            reference: None,
            last: 0.0,
            python: python.to_path_buf(),
            fresh_path: std::env::join_paths(fresh).ok(),
            whole: false,
            timed_out: false,
        })
    }

    /// Writes the run configuration of a run; returns its path.
    fn config(&self, to_end: bool) -> Result<PathBuf, CliError> {
        let capture_path = self.work.join("capture.json");
        let _ = std::fs::remove_file(&capture_path);
        let _ = std::fs::remove_file(self.work.join("refused.txt"));
        let config = RunConfig {
            capture: Some(capture_path.to_string_lossy().into_owned()),
            steps: self.steps,
            stop_after: !to_end,
            refusal: Some(self.work.join("refused.txt").to_string_lossy().into_owned()),
            ..Default::default()
        };
        let config_path = self.work.join("run.config");
        std::fs::write(&config_path, config.to_json())
            .map_err(io("cannot write the run configuration"))?;
        Ok(config_path)
    }

    /// What the last run left.
    fn outcome(&self) -> Result<Outcome, CliError> {
        if let Ok(why) = std::fs::read_to_string(self.work.join("refused.txt")) {
            return Err(CliError::Usage(why.trim().to_owned()));
        }
        let capture = std::fs::read_to_string(self.work.join("capture.json"))
            .ok()
            .and_then(|t| Capture::from_json(&t).ok());
        let report = capture.as_ref().map(gradsleuth_analysis::analyze);
        Ok(Outcome { capture, report })
    }

    /// Runs `script` under the tracer in a new interpreter from `cwd`, as a user runs the kit:
    /// nothing imported before it (the server has imported the script's packages, which hides
    /// an import the program needs for its side effect, such as registering a model), and
    /// not the script's folder on the path. Its output goes to `fresh.log`.
    fn run_fresh(&mut self, script: &Path, to_end: bool, cwd: &Path) -> Result<Outcome, CliError> {
        self.runs += 1;
        let config = self.config(to_end)?;
        let log = std::fs::File::create(self.work.join("fresh.log"))
            .map_err(io("cannot write the run's log"))?;
        let mut cmd = Command::new(&self.python);
        cmd.args(["-m", "gradsleuth._run", "--"])
            .arg(script)
            .args(&self.args)
            .current_dir(cwd)
            .env("GRADSLEUTH_RUN_CONFIG", &config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io("cannot write the run's log"))?)
            .stderr(log);
        match &self.fresh_path {
            Some(p) if !p.is_empty() => cmd.env("PYTHONPATH", p),
            _ => cmd.env_remove("PYTHONPATH"),
        };
        let mut child = cmd
            .spawn()
            .map_err(|e| CliError::Usage(format!("cannot start {}: {e}", self.python.display())))?;
        let started = std::time::Instant::now();
        while child.try_wait().map_err(io("the run"))?.is_none() {
            if started.elapsed().as_secs_f64() > self.timeout {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.outcome()
    }

    /// Runs `script` under the tracer; `to_end`: let it finish (else it ends after the
    /// observed steps).
    fn run(&mut self, script: &Path, to_end: bool) -> Result<Outcome, CliError> {
        self.run_observing(script, to_end, None)
    }

    /// [`run`](Self::run), with `observe` the file an instrumented script's `observe` calls
    /// write to.
    fn run_observing(
        &mut self,
        script: &Path,
        to_end: bool,
        observe: Option<&Path>,
    ) -> Result<Outcome, CliError> {
        self.runs += 1;
        let config_path = self.config(to_end)?;
        // Stopped after the observed steps, a candidate is held to the program's pace; run to
        // its end (the kit's check), only to the timeout.
        let timeout = match self.reference {
            Some(r) if !to_end || self.whole => self.timeout.min(r * SLOWER + SLACK),
            _ => self.timeout,
        };
        let started = std::time::Instant::now();
        let request = serde_json::json!({
            "script": script,
            "args": self.args,
            "config": config_path,
            "log": self.work.join("run.log"),
            "timeout": timeout,
            "observe": observe,
            "preload": self.preload,
        });
        writeln!(self.stdin, "{request}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| {
                CliError::Io(format!(
                    "the oracle stopped: {e} (see {})",
                    self.work.join("oracle.log").display()
                ))
            })?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| CliError::Io(format!("the oracle stopped: {e}")))?;
        self.last = started.elapsed().as_secs_f64();
        self.timed_out = serde_json::from_str::<serde_json::Value>(&line)
            .is_ok_and(|v| v["status"] == "timeout");
        if line.is_empty() {
            let why = std::fs::read_to_string(self.work.join("oracle.log")).unwrap_or_default();
            return Err(CliError::Io(format!(
                "the oracle stopped: {}",
                why.lines().last().unwrap_or("no output")
            )));
        }
        self.outcome()
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn error_kind(o: &Outcome) -> Option<String> {
    o.capture
        .as_ref()
        .and_then(|c| c.error.as_ref())
        .map(|e| e.kind.clone())
}

pub fn run(args: ReproArgs) -> Result<i32, CliError> {
    let began = std::time::Instant::now();
    let Some(script) = args.command.first() else {
        return Err(CliError::Usage(
            "nothing to reduce: gradsleuth repro train.py [ARGS...]".into(),
        ));
    };
    let script_path = std::path::absolute(script).unwrap_or_else(|_| PathBuf::from(script));
    let original = std::fs::read_to_string(&script_path)
        .map_err(|e| CliError::Usage(format!("no such script: {script} ({e})")))?;
    if !(args.budget.is_finite() && args.budget >= 0.0) {
        return Err(CliError::Usage("--budget takes a number of seconds".into()));
    }
    let script_dir = script_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let python = args
        .python
        .clone()
        .or_else(|| std::env::var_os("GRADSLEUTH_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let tmp = tempfile::tempdir().map_err(io("cannot create a temporary directory"))?;
    let work = tmp.path();
    let mut oracle = Oracle::start(&python, &script_dir, work, &args)?;
    oracle.preload = gradsleuth_repro::inline::installed_imports(&original, &script_dir);
    eprintln!("gradsleuth repro: running {script} under gradsleuth...");
    let (target, baseline_error) = baseline(&mut oracle, &script_path, args.finding.as_deref())?;
    eprintln!(
        "gradsleuth repro: keeping {} {}: {}",
        target.code, target.category, target.message
    );
    // Candidates run in a folder that mirrors the script's ([`mirror`]), under the script's
    // name: what the program reads beside itself (`__file__`-relative model code, configs) is
    // there, and tracebacks name the same file.
    let program_dir = work.join("program");
    mirror(&script_dir, &program_dir, &script_path)?;
    let candidate = program_dir.join(
        script_path
            .file_name()
            .unwrap_or_else(|| std::ffi::OsStr::new("candidate.py")),
    );
    let judge = Judge {
        candidate: &candidate,
        target: &target,
        baseline_error,
    };
    // What is left of the budget once the checks at the end have the time the runs of the
    // script as given took.
    let setup = began.elapsed();
    let budget = Duration::from_secs_f64(args.budget).saturating_sub(setup * 2);
    let reduction = reduce_script(&mut oracle, &judge, &original, &script_dir, &args, budget);
    // The kit: repro.py with the symptom check when it holds to the end of the program.
    std::fs::create_dir_all(&args.out).map_err(io("cannot create the kit's folder"))?;
    let out = std::path::absolute(&args.out).unwrap_or_else(|_| args.out.clone());
    let repro = out.join("repro.py");
    let env = super::environment(&python);
    let name = script_path
        .file_name()
        .map_or_else(|| script.clone(), |n| n.to_string_lossy().into_owned());
    let reduced = &reduction.reduced;
    let mut kit = Kit {
        target: &target,
        finding: None,
        program: &reduced.source,
        original: &name,
        original_lines: code_lines(&original),
        program_lines: code_lines(&reduced.source),
        seconds: reduced.seconds,
        checks: oracle.runs,
        environment: &env,
        asserts_symptom: false,
    };
    let params: Vec<String> = oracle_params(&mut oracle, &candidate, &reduced.source, &target);
    // repro.py is checked as a user will run it: a new interpreter, from the kit's folder.
    let checker = KitCheck {
        repro: &repro,
        out: &out,
        params: &params,
        target: &target,
    };
    let alone = check_alone(&mut oracle, &checker, &kit, &reduction, &script_dir)?;
    let (asserts, final_report) = alone.verdict.clone().unwrap_or((false, None));
    kit.program = &alone.program;
    kit.program_lines = code_lines(&alone.program);
    kit.asserts_symptom = asserts;
    let symptom = symptom_check(&params);
    std::fs::write(&repro, kit.repro_py(asserts.then_some(&symptom)))
        .map_err(io("cannot write repro.py"))?;
    // Candidates are judged on their first steps: what the program does after them is not
    // checked, and a kit that does not assert its symptom may raise there (a label beyond a
    // class count the reduction dropped). Said, with the error.
    let late_error = if alone.why_not.is_none() && alone.verdict.is_some() && !asserts {
        oracle
            .run_fresh(&repro, true, &out)
            .ok()
            .and_then(|o| o.capture.and_then(|c| c.error))
            .filter(|e| Some(&e.kind) != judge.baseline_error.as_ref())
            .map(|e| format!("{}: {}", e.kind, e.message.lines().next().unwrap_or("")))
    } else {
        None
    };
    let finding = final_report
        .as_ref()
        .and_then(|r| r.findings.iter().find(|f| f.code == target.code).cloned());
    kit.finding = finding.as_ref();
    let files = [
        ("test_repro.py", kit.test_py()),
        ("bench_repro.py", kit.bench_py()),
        ("ENVIRONMENT.md", kit.environment_md()),
        ("ISSUE.md", kit.issue_md()),
    ];
    for (file, text) in &files {
        std::fs::write(out.join(file), text)
            .map_err(|e| CliError::Io(format!("cannot write {file}: {e}")))?;
    }
    println!(
        "gradsleuth repro: {} {} kept in {} lines ({name}: {}), {} runs, {:.0} s{}",
        target.code,
        target.category,
        kit.program_lines,
        kit.original_lines,
        oracle.runs,
        began.elapsed().as_secs_f64(),
        if reduced.timed_out {
            " (budget reached: a smaller program may exist)"
        } else {
            ""
        }
    );
    print_notes(
        &reduction,
        &alone,
        late_error.as_deref(),
        &script_dir,
        args.steps,
    );
    print_files(&args.out, kit.asserts_symptom);
    Ok(0)
}

/// Runs the script as given (its capture chooses the target finding), then, within [`WHOLE`]
/// seconds, to its end: a script that ends that soon is judged whole (every candidate then
/// runs to its end, held to the program's pace). Returns the target and the error the
/// program raises (a candidate must raise the same).
fn baseline(
    oracle: &mut Oracle,
    script_path: &Path,
    finding: Option<&str>,
) -> Result<(Target, Option<String>), CliError> {
    let first = oracle.run(script_path, false)?;
    oracle.reference = Some(oracle.last);
    let Some(report) = &first.report else {
        return Err(CliError::Usage(format!(
            "{} left no capture (see {})",
            script_path.display(),
            oracle.work.join("run.log").display()
        )));
    };
    let target = Target::choose(report, finding).map_err(CliError::Usage)?;
    let mut baseline_error = error_kind(&first);
    let (limit, stop_pace) = (oracle.timeout, oracle.reference);
    oracle.timeout = limit.min(WHOLE);
    oracle.reference = None;
    if let Ok(whole) = oracle.run(script_path, true) {
        if !oracle.timed_out && whole.report.as_ref().is_some_and(|r| target.holds(r)) {
            oracle.whole = true;
            baseline_error = error_kind(&whole);
        }
    }
    oracle.timeout = limit;
    oracle.reference = if oracle.whole {
        Some(oracle.last)
    } else {
        stop_pace
    };
    Ok((target, baseline_error))
}

/// Whether a candidate program keeps the finding.
struct Judge<'a> {
    /// Where a candidate is written (the mirrored folder, under the script's name).
    candidate: &'a Path,
    target: &'a Target,
    /// The error the program raises: a candidate must raise the same (or none, as it).
    baseline_error: Option<String>,
}

impl Judge<'_> {
    /// Runs `source` (to its end when the program is judged whole): the target finding holds
    /// and the error is the program's. A kept candidate tightens the pace limit: later ones
    /// are held to the fastest kept program's time, so the limit never creeps up.
    fn holds(&self, source: &str, oracle: &mut Oracle) -> bool {
        if std::fs::write(self.candidate, source).is_err() {
            return false;
        }
        let whole = oracle.whole;
        match oracle.run(self.candidate, whole) {
            Ok(o) => {
                let kept = o.report.as_ref().is_some_and(|r| self.target.holds(r))
                    && error_kind(&o) == self.baseline_error;
                if kept {
                    oracle.reference =
                        Some(oracle.reference.map_or(oracle.last, |r| r.min(oracle.last)));
                }
                kept
            }
            Err(_) => false,
        }
    }
}

/// What the reduction made of the script.
struct Reduction {
    /// The program the syntax-tree reduction started from (modules pasted in, data rebuilt,
    /// arguments folded).
    start: String,
    reduced: gradsleuth_repro::reduce::Reduced,
    /// Data sites fed with rebuilt values.
    fed: Vec<String>,
    /// Arguments folded to their constant.
    folded: usize,
    /// Local modules pasted in.
    inlined: Vec<String>,
}

/// Local modules pasted in, the first pass (data and pretrained weights rebuilt, arguments
/// folded), then the syntax-tree reduction, all within `budget`.
fn reduce_script(
    oracle: &mut Oracle,
    judge: &Judge,
    original: &str,
    script_dir: &Path,
    args: &ReproArgs,
    budget: Duration,
) -> Reduction {
    // Local modules pasted in first, so the result stands alone.
    let mut start = original.to_owned();
    let mut inlined = Vec::new();
    if let Some((flat, modules)) =
        gradsleuth_repro::inline::inline_local_imports(original, script_dir)
    {
        if judge.holds(&flat, oracle) {
            start = flat;
            inlined = modules;
        }
    }
    let started = std::time::Instant::now();
    let within = |s: &str, o: &mut Oracle| started.elapsed() < budget && judge.holds(s, o);
    let (start, fed) = data_pass(oracle, judge.candidate, &start, args.steps, &within);
    // Arguments computed from the data or the command line become the literals they were.
    let (start, folded) = fold_pass(oracle, judge.candidate, script_dir, &start, &within);
    let mut reduced = reduce(
        &start,
        |s| judge.holds(s, oracle),
        budget.saturating_sub(started.elapsed()),
    );
    reduced.seconds = started.elapsed().as_secs_f64();
    Reduction {
        start,
        reduced,
        fed,
        folded,
        inlined,
    }
}

/// The kit's program as checked alone.
struct Alone {
    program: String,
    /// (asserts the symptom, the run's report) when the finding held; None when it did not.
    verdict: Option<(bool, Option<Report>)>,
    /// Imports the reduction dropped that the program needs run alone.
    restored: Vec<String>,
    /// Files copied beside repro.py, and those left out for size.
    beside: Vec<String>,
    too_big: Vec<String>,
    /// When it does not hold alone: the fresh run's last line.
    why_not: Option<String>,
}

/// Checks the reduced program as a user will run it (a new interpreter, from the kit's
/// folder). The reducer's server had the script's packages imported, so an import the program
/// needs only for its side effect (torchvision's model registry, a plugin that registers
/// itself) was dropped unseen: when the finding is gone alone, what the reduction dropped is
/// put back, then each one the program shows the finding without is dropped again. A program
/// that still needs the server is checked there (and said so).
fn check_alone(
    oracle: &mut Oracle,
    checker: &KitCheck,
    kit: &Kit,
    reduction: &Reduction,
    script_dir: &Path,
) -> Result<Alone, CliError> {
    let reduced = &reduction.reduced.source;
    let out = checker.out;
    let check = |oracle: &mut Oracle, program: &str, fresh: bool, need_symptom: bool| {
        let kit = Kit {
            program,
            program_lines: code_lines(program),
            ..*kit
        };
        checker.run(oracle, &kit, fresh, need_symptom)
    };
    // What the program still reads beside itself goes into the kit, so repro.py runs there.
    let (mut beside, mut too_big) = copy_local_files(reduced, script_dir, out)?;
    let mut program = reduced.clone();
    let mut verdict = check(oracle, &program, true, false);
    let dropped = gradsleuth_repro::data::dropped_imports(&reduction.start, reduced);
    let mut restored: Vec<String> = Vec::new();
    let all = if verdict.is_none() && !dropped.is_empty() {
        gradsleuth_repro::data::with_statements(reduced, &dropped)
    } else {
        None
    };
    if let Some(all) = all {
        let (more, big) = copy_local_files(&all, script_dir, out)?;
        if let Some(v) = check(oracle, &all, true, false) {
            // Each one dropped again must keep what the kit shows (the symptom asserted).
            let need_symptom = v.0;
            verdict = Some(v);
            restored.clone_from(&dropped);
            if dropped.len() <= MAX_RESTORED_TRIED {
                for statement in &dropped {
                    let fewer: Vec<String> = restored
                        .iter()
                        .filter(|s| *s != statement)
                        .cloned()
                        .collect();
                    let Some(p) = gradsleuth_repro::data::with_statements(reduced, &fewer) else {
                        continue;
                    };
                    if let Some(v) = check(oracle, &p, true, need_symptom) {
                        verdict = Some(v);
                        restored = fewer;
                    }
                }
            }
            program = gradsleuth_repro::data::with_statements(reduced, &restored).unwrap_or(all);
            let needed = gradsleuth_repro::inline::local_files(&program, script_dir);
            for m in more {
                if needed.contains(&m) && !beside.contains(&m) {
                    beside.push(m);
                }
            }
            for m in big {
                if !too_big.contains(&m) {
                    too_big.push(m);
                }
            }
        }
    }
    let why_not = verdict.is_none().then(|| {
        std::fs::read_to_string(oracle.work.join("fresh.log"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_default()
    });
    if why_not.is_some() {
        program = reduced.clone();
        verdict = check(oracle, &program, false, false);
    }
    Ok(Alone {
        program,
        verdict,
        restored,
        beside,
        too_big,
        why_not,
    })
}

/// The summary's lines under its first: what was pasted in, copied, folded, put back, fed,
/// and the warnings.
fn print_notes(
    reduction: &Reduction,
    alone: &Alone,
    late_error: Option<&str>,
    script_dir: &Path,
    steps: u32,
) {
    if !reduction.inlined.is_empty() {
        println!(
            "  local modules pasted in: {}",
            reduction.inlined.join(", ")
        );
    }
    if !alone.beside.is_empty() {
        println!(
            "  files the program reads, copied beside it: {}",
            alone.beside.join(", ")
        );
    }
    if !alone.too_big.is_empty() {
        println!(
            "  not copied (over {} MB in all; put them beside repro.py from {}): {}",
            KIT_FILES_MB,
            script_dir.display(),
            alone.too_big.join(", ")
        );
    }
    if reduction.folded > 0 {
        println!(
            "  arguments replaced by the constant they always were: {}",
            reduction.folded
        );
    }
    if !alone.restored.is_empty() {
        println!(
            "  imports put back (run alone, the program needs them): {}",
            alone.restored.join("; ").replace('\n', " ")
        );
    }
    if let Some(why) = &alone.why_not {
        println!(
            "  warning: repro.py shows the finding only in the reducer's runs, not run alone in a new interpreter{}",
            if why.is_empty() { String::new() } else { format!(" ({why})") }
        );
    }
    if let Some(e) = late_error {
        println!(
            "  warning: run to its end, repro.py raises `{e}` (each candidate was checked on its first {steps} steps only)"
        );
    }
    if !reduction.fed.is_empty() {
        println!(
            "  rebuilt from what the script saw (random values of the same shapes, models from their config): {}",
            reduction.fed.join(", ")
        );
    }
}

/// The kit's files, as the user named its folder.
fn print_files(out: &Path, asserts_symptom: bool) {
    let shown = |f: &str| out.join(f).to_string_lossy().into_owned();
    println!(
        "  {:<28} the program{}",
        shown("repro.py"),
        if asserts_symptom {
            " (prints the symptom and asserts it)"
        } else {
            ""
        }
    );
    for (file, what) in [
        ("test_repro.py", "fails while the bug exists"),
        ("bench_repro.py", "a torch.utils.benchmark timing"),
        ("ENVIRONMENT.md", "Python, torch, CUDA, OS, gradsleuth"),
        ("ISSUE.md", "Problem, Root cause, Fix, Test, Performance"),
    ] {
        println!("  {:<28} {what}", shown(file));
    }
}

/// Puts every entry of `dir` but `script` (and hidden ones) into `into`: files up to
/// [`KIT_FILES_MB`] copied (a candidate that writes beside itself, `torch.save` to
/// `__file__`'s folder, writes the copy, never the user's file), folders and larger files
/// linked.
fn mirror(dir: &Path, into: &Path, script: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(into).map_err(io("cannot create the candidates' folder"))?;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if name.to_string_lossy().starts_with('.') || e.path() == script {
            continue;
        }
        let small = e
            .metadata()
            .is_ok_and(|m| m.is_file() && m.len() <= KIT_FILES_MB * 1024 * 1024);
        if small && std::fs::copy(e.path(), into.join(&name)).is_ok() {
            continue;
        }
        #[cfg(unix)]
        let _ = std::os::unix::fs::symlink(e.path(), into.join(&name));
    }
    Ok(())
}

/// Restored imports (see `run`) are dropped again one by one only up to this many; beyond it,
/// all stay.
const MAX_RESTORED_TRIED: usize = 8;

/// Where `repro.py` goes and what it must show.
struct KitCheck<'a> {
    repro: &'a Path,
    /// The kit's folder (a run in a new interpreter starts there).
    out: &'a Path,
    params: &'a [String],
    target: &'a Target,
}

impl KitCheck<'_> {
    /// Writes `repro.py` for `kit` and runs it (`fresh`: in a new interpreter, else in the
    /// server): with the symptom check to the program's end when `params` are known, else
    /// (unless `need_symptom`) without it, stopped after the observed steps. Some((asserts the
    /// symptom, the run's report)) when the finding holds.
    fn run(
        &self,
        oracle: &mut Oracle,
        kit: &Kit,
        fresh: bool,
        need_symptom: bool,
    ) -> Option<(bool, Option<Report>)> {
        let (repro, out, params, target) = (self.repro, self.out, self.params, self.target);
        let run = |oracle: &mut Oracle, text: String, to_end: bool| {
            std::fs::write(repro, text).ok()?;
            if fresh {
                oracle.run_fresh(repro, to_end, out).ok()
            } else {
                oracle.run(repro, to_end).ok()
            }
        };
        if !params.is_empty() {
            if let Some(o) = run(oracle, kit.repro_py(Some(&symptom_check(params))), true) {
                if error_kind(&o).is_none() && o.report.as_ref().is_some_and(|r| target.holds(r)) {
                    return Some((true, o.report));
                }
            }
        }
        if need_symptom {
            return None;
        }
        let o = run(oracle, kit.repro_py(None), false)?;
        o.report
            .as_ref()
            .is_some_and(|r| target.holds(r))
            .then_some((false, o.report))
    }
}

/// The kit carries at most this much of the script's folder.
const KIT_FILES_MB: u64 = 16;

/// Copies the entries of `dir` that `source` reads beside itself
/// ([`gradsleuth_repro::inline::local_files`]) into `out`, never over a kit file nor beyond
/// [`KIT_FILES_MB`] in all (folders: their files, `__pycache__` left out). Returns (copied,
/// left out for size).
fn copy_local_files(
    source: &str,
    dir: &Path,
    out: &Path,
) -> Result<(Vec<String>, Vec<String>), CliError> {
    const KIT: [&str; 5] = [
        "repro.py",
        "test_repro.py",
        "bench_repro.py",
        "ENVIRONMENT.md",
        "ISSUE.md",
    ];
    fn files(p: &Path, out: &mut Vec<PathBuf>) {
        if p.is_file() {
            out.push(p.to_path_buf());
        } else if let Ok(d) = std::fs::read_dir(p) {
            for e in d.flatten() {
                if e.file_name() != "__pycache__" {
                    files(&e.path(), out);
                }
            }
        }
    }
    let mut copied = Vec::new();
    let mut left = Vec::new();
    // A kit written into the script's own folder has them already (never copy onto itself).
    if std::fs::canonicalize(dir).ok() == std::fs::canonicalize(out).ok() {
        return Ok((copied, left));
    }
    let mut budget = KIT_FILES_MB * 1024 * 1024;
    for name in gradsleuth_repro::inline::local_files(source, dir) {
        if KIT.contains(&name.as_str()) {
            continue;
        }
        let mut all = Vec::new();
        files(&dir.join(&name), &mut all);
        let size: u64 = all
            .iter()
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum();
        if size > budget {
            left.push(name);
            continue;
        }
        budget -= size;
        for f in &all {
            let rel = f.strip_prefix(dir).unwrap_or(f);
            let to = out.join(rel);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(io("cannot create the kit's folder"))?;
            }
            std::fs::copy(f, &to).map_err(|e| {
                CliError::Io(format!("cannot copy {} into the kit: {e}", f.display()))
            })?;
        }
        copied.push(name);
    }
    Ok((copied, left))
}

/// Repro's first pass ([`gradsleuth_repro::data`]): the script runs once with each data site
/// observed; then, from the last site to the first (earlier sites' offsets stay valid), each
/// site whose value can be rebuilt takes it, kept when the finding still holds. A loop is
/// tried with one value, then with one per observed step. Returns the program and the sites
/// fed (`line N: TARGET`).
fn data_pass(
    oracle: &mut Oracle,
    candidate: &Path,
    source: &str,
    steps: u32,
    holds: &dyn Fn(&str, &mut Oracle) -> bool,
) -> (String, Vec<String>) {
    use gradsleuth_repro::data;
    let sites = data::sites(source);
    if sites.is_empty() {
        return (source.to_owned(), Vec::new());
    }
    let Some(observed) = observe(oracle, candidate, &data::instrument(source, &sites)) else {
        return (source.to_owned(), Vec::new());
    };
    let mut bare = source.to_owned();
    let mut modules: Vec<String> = Vec::new();
    let mut fed = Vec::new();
    for site in sites.iter().rev() {
        let Some(value) = observed.get(&site.id) else {
            continue;
        };
        let repeats: &[u32] = if site.is_loop() && steps > 1 {
            &[1, steps]
        } else {
            &[1]
        };
        for &repeat in repeats {
            let Some((next, needed)) = data::substitute(&bare, site, value, repeat) else {
                break;
            };
            let mut all = modules.clone();
            all.extend(needed.into_iter().filter(|m| !modules.contains(m)));
            let Some(program) = data::with_imports(&next, &all) else {
                break;
            };
            if holds(&program, oracle) {
                bare = next;
                modules = all;
                fed.push(format!("line {}: {}", site.line, site.target));
                break;
            }
        }
    }
    fed.reverse();
    let program = data::with_imports(&bare, &modules).unwrap_or(bare);
    (program, fed)
}

/// Runs an instrumented program once; what its `observe` calls recorded, by site.
fn observe(
    oracle: &mut Oracle,
    candidate: &Path,
    instrumented: &str,
) -> Option<std::collections::BTreeMap<usize, gradsleuth_repro::data::Value>> {
    let path = oracle.work.join("observed.jsonl");
    let _ = std::fs::remove_file(&path);
    std::fs::write(candidate, instrumented).ok()?;
    oracle.run_observing(candidate, false, Some(&path)).ok()?;
    Some(gradsleuth_repro::data::observations(
        &std::fs::read_to_string(&path).unwrap_or_default(),
    ))
}

/// [`gradsleuth_repro::fold`]: each call argument that always had one literal value takes it,
/// kept when the finding still holds. Returns the program and how many were folded.
fn fold_pass(
    oracle: &mut Oracle,
    candidate: &Path,
    script_dir: &Path,
    source: &str,
    holds: &dyn Fn(&str, &mut Oracle) -> bool,
) -> (String, usize) {
    use gradsleuth_repro::fold;
    let args = fold::args(source);
    if args.is_empty() {
        return (source.to_owned(), 0);
    }
    let Some(observed) = observe(oracle, candidate, &fold::instrument(source, &args)) else {
        return (source.to_owned(), 0);
    };
    // A path into the folder the candidate ran from (or the script's, through its links) is
    // where this machine keeps the files, not a constant of the program: never folded.
    let mut here: Vec<String> = Vec::new();
    for d in [candidate.parent(), script_dir.into()]
        .into_iter()
        .flatten()
    {
        here.push(d.to_string_lossy().into_owned());
        if let Ok(c) = std::fs::canonicalize(d) {
            here.push(c.to_string_lossy().into_owned());
        }
    }
    here.retain(|d| d.len() > 1);
    fold::fold(
        source,
        &args,
        |id| {
            observed
                .get(&id)
                .and_then(fold::constant)
                .filter(|c| !here.iter().any(|d| c.contains(d.as_str())))
                .map(str::to_owned)
        },
        |c| holds(c, oracle),
    )
}

/// The parameter names the reduced program's finding gives (they may differ from the
/// original's when the model was renamed on the way).
fn oracle_params(
    oracle: &mut Oracle,
    candidate: &Path,
    source: &str,
    target: &Target,
) -> Vec<String> {
    if std::fs::write(candidate, source).is_err() {
        return Vec::new();
    }
    oracle
        .run(candidate, false)
        .ok()
        .and_then(|o| o.report)
        .and_then(|r| {
            r.findings
                .into_iter()
                .find(|f| f.code == target.code)
                .map(|f| f.params)
        })
        .unwrap_or_default()
}
