//! `gradsleuth explain`: PyTorch errors triaged into meaning, likely causes, checks and fixes.
//!
//! The knowledge base is data, not code: `signatures.toml` (embedded at build time) holds one
//! documented entry per error signature. [`Kb::builtin`] parses it once and compiles the
//! literal anchors of every signature into one Aho-Corasick automaton, so each line is scanned
//! once whatever the number of signatures; only a signature whose anchor occurs runs its
//! regex (compiled the first time it is needed), which confirms the match and pulls out its
//! named fields (shapes, versions, node names, sizes, ranks). A single compiled `RegexSet` was
//! measured too: 8 ms to build, which a pasted two-line traceback cannot afford.
//!
//! [`Scanner`] reads a log line by line (streaming, any size, any bytes): it strips torchrun
//! rank prefixes (`[rank1]:`, `[default0]:`), follows Python tracebacks so each error gets the
//! user's own frame as its location, merges repeats (the same error on every rank is one
//! finding with its ranks), and remembers the last exception line so an unrecognised error
//! can still be reported by type and message.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::sync::OnceLock;

use aho_corasick::AhoCorasick;
use gradsleuth_model::{Category, Explanation, Finding, Location, Severity};
use regex::bytes::{Regex as BytesRegex, RegexBuilder};
use regex::Regex;
use serde::Deserialize;

/// One knowledge-base entry, as written in `signatures.toml`.
#[derive(Debug, Clone, Deserialize)]
pub struct Signature {
    pub id: String,
    pub code: String,
    pub category: Category,
    pub title: String,
    pub pattern: String,
    /// Literal texts, one of which every match contains.
    pub anchors: Vec<String>,
    pub meaning: String,
    pub causes: Vec<String>,
    pub checks: Vec<String>,
    pub fixes: Vec<String>,
    #[serde(default)]
    pub related: Vec<String>,
    #[serde(default)]
    pub source: String,
    /// The signature holds only when a frame of the traceback is in one of these files (path
    /// fragments): the same message means different things from different callers.
    #[serde(default)]
    pub when_frames: Vec<String>,
    /// ... and never when a frame is in one of these.
    #[serde(default)]
    pub unless_frames: Vec<String>,
}

impl Signature {
    /// Whether the traceback's frames (their files) allow this signature.
    pub fn fits(&self, frames: &[&str]) -> bool {
        let any = |parts: &[String]| {
            frames
                .iter()
                .any(|f| parts.iter().any(|p| f.contains(p.as_str())))
        };
        (self.when_frames.is_empty() || any(&self.when_frames)) && !any(&self.unless_frames)
    }
}

#[derive(Deserialize)]
struct File {
    signature: Vec<Signature>,
}

/// The compiled knowledge base.
pub struct Kb {
    pub signatures: Vec<Signature>,
    /// All anchors of all signatures; `owner[i]` is the signature of anchor `i`.
    anchors: AhoCorasick,
    owner: Vec<usize>,
    /// Each signature's own regex (for its fields), compiled the first time it matches.
    regexes: Vec<OnceLock<Option<BytesRegex>>>,
}

/// The embedded knowledge base text.
pub const SIGNATURES: &str = include_str!("signatures.toml");

impl Kb {
    /// Parses and compiles a knowledge base.
    pub fn parse(text: &str) -> Result<Kb, String> {
        let file: File = toml::from_str(text).map_err(|e| format!("knowledge base: {e}"))?;
        let mut literals = Vec::new();
        let mut owner = Vec::new();
        for (i, s) in file.signature.iter().enumerate() {
            if s.anchors.is_empty() {
                return Err(format!("knowledge base: {} has no anchors", s.id));
            }
            for a in &s.anchors {
                literals.push(a.as_str());
                owner.push(i);
            }
        }
        let anchors =
            AhoCorasick::new(&literals).map_err(|e| format!("knowledge base anchors: {e}"))?;
        let regexes = file.signature.iter().map(|_| OnceLock::new()).collect();
        Ok(Kb {
            signatures: file.signature,
            anchors,
            owner,
            regexes,
        })
    }

    /// The built-in knowledge base, compiled once per process.
    pub fn builtin() -> &'static Kb {
        static KB: OnceLock<Kb> = OnceLock::new();
        KB.get_or_init(|| {
            Kb::parse(SIGNATURES).expect("the embedded knowledge base is valid (tested)")
        })
    }

    /// Signatures matching `line` raised under a traceback through `frames` (files), each with
    /// its named fields.
    pub fn matches(&self, line: &str, frames: &[&str]) -> Vec<(usize, BTreeMap<String, String>)> {
        let mut out = Vec::new();
        let mut candidates: Vec<usize> = self
            .anchors
            .find_overlapping_iter(line)
            .map(|m| self.owner[m.pattern().as_usize()])
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        candidates.retain(|&i| self.signatures[i].fits(frames));
        for i in candidates {
            // PyTorch's messages are ASCII: Unicode-aware classes would only make the
            // automaton larger. Patterns are checked by the crate's tests; a bad one matches
            // nothing rather than failing a user's run.
            let re = self.regexes[i]
                .get_or_init(|| {
                    RegexBuilder::new(&self.signatures[i].pattern)
                        .unicode(false)
                        .build()
                        .ok()
                })
                .as_ref();
            let Some(re) = re else { continue };
            if !re.is_match(line.as_bytes()) {
                continue;
            }
            let mut fields = BTreeMap::new();
            if let Some(caps) = re.captures(line.as_bytes()) {
                for name in re.capture_names().flatten() {
                    if let Some(m) = caps.name(name) {
                        fields.insert(
                            name.to_owned(),
                            String::from_utf8_lossy(m.as_bytes()).trim().to_owned(),
                        );
                    }
                }
            }
            out.push((i, fields));
        }
        out
    }
}

/// A recognised error in a log.
#[derive(Debug, Clone)]
pub struct Hit {
    pub signature: usize,
    pub fields: BTreeMap<String, String>,
    /// The user's own frame in the traceback that raised it.
    pub location: Option<Location>,
    pub ranks: BTreeSet<u32>,
    /// 1-based line of the log where it first appears.
    pub line: usize,
    pub count: u32,
    /// The line as it appeared (rank prefix stripped), at most 2,000 characters.
    pub text: String,
}

/// The last exception line seen (`TypeName: message`), for unrecognised errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exception {
    pub kind: String,
    pub message: String,
}

/// Streaming log scanner.
pub struct Scanner<'k> {
    kb: &'k Kb,
    frames: Vec<Location>,
    pub hits: Vec<Hit>,
    pub last_exception: Option<Exception>,
    line_no: usize,
    rank_re: Regex,
    frame_re: Regex,
    exc_re: Regex,
    native_re: Regex,
}

/// Native frames that only carry the error, not its cause.
fn is_error_plumbing(symbol: &str) -> bool {
    [
        "c10::Error",
        "c10::detail::torchCheckFail",
        "c10::detail::torchInternalAssertFail",
        "c10::get_backtrace",
        "c10::(anonymous namespace)::GetFetchStackTrace",
    ]
    .iter()
    .any(|p| symbol.contains(p))
}

/// Frames that are not the user's code.
fn is_library(file: &str) -> bool {
    file.starts_with('<')
        || file.contains("site-packages")
        || file.contains("dist-packages")
        || file.contains("/lib/python3")
        || file.contains("/torch/")
}

impl<'k> Scanner<'k> {
    pub fn new(kb: &'k Kb) -> Self {
        Scanner {
            kb,
            frames: Vec::new(),
            hits: Vec::new(),
            last_exception: None,
            line_no: 0,
            rank_re: Regex::new(r"^\s*\[(?:rank|default|Rank )(\d+)\]:?\s?").expect("valid"),
            frame_re: Regex::new(r#"^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?"#).expect("valid"),
            exc_re: Regex::new(r"^(?P<kind>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Fault|Failure)): ?(?P<message>.*)$")
                .expect("valid"),
            native_re: Regex::new(r"^\s*frame #(?P<n>\d+): (?P<symbol>.+?)(?: \+ 0x[0-9a-f]+)?(?: \(0x[0-9a-f]+ in (?P<lib>[^)]+)\))?$").expect("valid"),
        }
    }

    /// Feeds one line (without its newline; any bytes).
    pub fn feed(&mut self, raw: &[u8]) {
        self.line_no += 1;
        let text = String::from_utf8_lossy(raw);
        let mut line: &str = text.trim_end_matches(['\r', '\n']);
        let mut rank = None;
        if let Some(c) = self.rank_re.captures(line) {
            rank = c.get(1).and_then(|m| m.as_str().parse::<u32>().ok());
            line = &line[c.get(0).map_or(0, |m| m.end())..];
        }
        // glog prefixes (`[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] `) carry no meaning.
        if line.starts_with("[E") || line.starts_with("[W") || line.starts_with("[I") {
            if let Some(end) = line.find("] ") {
                line = &line[end + 2..];
                if let Some(c) = self.rank_re.captures(line) {
                    rank = rank.or_else(|| c.get(1).and_then(|m| m.as_str().parse::<u32>().ok()));
                }
            }
        }
        if line.len() > 20_000 {
            let mut cut = 20_000;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line = &line[..cut];
        }
        if line.starts_with("Traceback (most recent call last)") {
            self.frames.clear();
        } else if line.trim_start().starts_with("File \"") {
            if let Some(c) = self.frame_re.captures(line) {
                let mut loc = Location::new(&c["file"], c["line"].parse().unwrap_or(1));
                loc.function = c.name("func").map(|f| f.as_str().trim().to_owned());
                self.frames.push(loc);
                if self.frames.len() > 512 {
                    self.frames.remove(0);
                }
            }
            return;
        }
        // C++ frames (`frame #3: at::native::foo(...) + 0x12 (0x7f.. in libtorch_cpu.so)`) after
        // an error: the first one past the error plumbing is where the native code failed.
        if let Some(c) = self.native_re.captures(line) {
            let symbol = c["symbol"].trim().to_owned();
            if let Some(h) = self.hits.last_mut() {
                if !h.fields.contains_key("native_frame") && !is_error_plumbing(&symbol) {
                    let lib = c
                        .name("lib")
                        .map(|l| l.as_str().rsplit('/').next().unwrap_or(""))
                        .unwrap_or("");
                    h.fields.insert(
                        "native_frame".to_owned(),
                        if lib.is_empty() {
                            symbol
                        } else {
                            format!("{symbol} in {lib}")
                        },
                    );
                }
            }
            return;
        }
        if let Some(c) = self.exc_re.captures(line) {
            self.last_exception = Some(Exception {
                kind: c["kind"].to_owned(),
                message: c["message"].chars().take(2000).collect(),
            });
        }
        let files: Vec<&str> = self.frames.iter().map(|f| f.file.as_str()).collect();
        for (sig, fields) in self.kb.matches(line, &files) {
            let location = self
                .frames
                .iter()
                .rev()
                .find(|f| !is_library(&f.file))
                .cloned();
            if let Some(h) = self
                .hits
                .iter_mut()
                .find(|h| h.signature == sig && h.fields == fields)
            {
                h.count += 1;
                h.ranks.extend(rank);
                if h.location.is_none() {
                    h.location = location;
                }
                continue;
            }
            self.hits.push(Hit {
                signature: sig,
                fields,
                location,
                ranks: rank.into_iter().collect(),
                line: self.line_no,
                count: 1,
                text: line.chars().take(2000).collect(),
            });
        }
    }

    /// Reads a whole log, streaming.
    pub fn read(&mut self, mut reader: impl BufRead) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(4096);
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                return Ok(());
            }
            self.feed(&buf);
        }
    }

    /// The findings, one per recognised error, in order of first appearance.
    pub fn findings(&self) -> Vec<Finding> {
        self.hits.iter().map(|h| finding(self.kb, h)).collect()
    }
}

/// `{name}` placeholders in a text replaced by the hit's fields (unknown ones: "?").
fn fill(text: &str, fields: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start].replace("}}", "}"));
        let after = &rest[start + 1..];
        // `{{` is a literal brace.
        if let Some(stripped) = after.strip_prefix('{') {
            out.push('{');
            rest = stripped;
            continue;
        }
        match after.find('}') {
            Some(end)
                if after[..end]
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_')
                    && end > 0 =>
            {
                let key = &after[..end];
                out.push_str(
                    fields
                        .get(key)
                        .map(String::as_str)
                        .filter(|v| !v.is_empty())
                        .unwrap_or("?"),
                );
                rest = &after[end + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(&rest.replace("}}", "}"));
    out
}

/// The finding for a hit.
pub fn finding(kb: &Kb, h: &Hit) -> Finding {
    let s = &kb.signatures[h.signature];
    let mut fields = h.fields.clone();
    fields.retain(|_, v| !v.is_empty());
    let explanation = Explanation {
        signature: s.id.clone(),
        title: s.title.clone(),
        meaning: fill(&s.meaning, &fields),
        causes: s.causes.iter().map(|c| fill(c, &fields)).collect(),
        checks: s.checks.iter().map(|c| fill(c, &fields)).collect(),
        fixes: s.fixes.iter().map(|c| fill(c, &fields)).collect(),
        fields: fields.clone(),
        related_checks: s.related.clone(),
        occurrences: h.count,
        source: s.source.clone(),
    };
    let mut f = Finding::new(
        &s.code,
        s.category,
        Severity::Error,
        format!("{}: {}", s.title, explanation.meaning),
    )
    .at(h.location.clone())
    .fix(explanation.fixes.first().cloned().unwrap_or_default());
    f.ranks = h.ranks.iter().copied().collect();
    f.explanation = Some(explanation);
    f
}

/// Everything `explain` found in a text.
pub struct Outcome {
    pub findings: Vec<Finding>,
    pub last_exception: Option<Exception>,
}

/// Explains a text (a traceback, a message).
pub fn explain_text(text: &str) -> Outcome {
    let kb = Kb::builtin();
    let mut sc = Scanner::new(kb);
    for line in text.split('\n') {
        sc.feed(line.as_bytes());
    }
    Outcome {
        findings: sc.findings(),
        last_exception: sc.last_exception,
    }
}

/// The explanation of one exception (`type`, `message`), for `run`'s report.
pub fn explain_exception(kind: &str, message: &str) -> Option<Explanation> {
    explain_raised(kind, message, &[])
}

/// The explanation of one exception raised through `frames` (the traceback's files, outermost
/// first): signatures that depend on the caller (a pickling error in a DataLoader worker or in
/// `torch.save`) see where it was raised.
pub fn explain_raised(kind: &str, message: &str, frames: &[String]) -> Option<Explanation> {
    let mut sc = Scanner::new(Kb::builtin());
    sc.frames = frames.iter().map(|f| Location::new(f, 1)).collect();
    for line in format!("{kind}: {message}").split('\n') {
        sc.feed(line.as_bytes());
    }
    sc.hits
        .first()
        .map(|h| finding(sc.kb, h))
        .and_then(|f| f.explanation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_knowledge_base_compiles_and_is_complete() {
        let kb = Kb::builtin();
        let placeholder = Regex::new(r"\{(\w+)\}").unwrap();
        assert!(kb.signatures.len() >= 40, "{}", kb.signatures.len());
        let mut ids = BTreeSet::new();
        let mut codes = BTreeSet::new();
        for s in &kb.signatures {
            assert!(ids.insert(s.id.clone()), "duplicate id {}", s.id);
            assert!(codes.insert(s.code.clone()), "duplicate code {}", s.code);
            assert!(
                !s.meaning.is_empty()
                    && !s.causes.is_empty()
                    && !s.checks.is_empty()
                    && !s.fixes.is_empty(),
                "{} is incomplete",
                s.id
            );
            assert!(!s.source.is_empty(), "{} has no provenance", s.id);
            // Every pattern compiles (as the scanner compiles it), every placeholder names a field.
            assert!(
                RegexBuilder::new(&s.pattern).unicode(false).build().is_ok(),
                "{}: bad pattern",
                s.id
            );
            let re = Regex::new(&s.pattern).unwrap();
            let names: BTreeSet<&str> = re.capture_names().flatten().collect();
            for text in std::iter::once(&s.meaning)
                .chain(&s.causes)
                .chain(&s.checks)
                .chain(&s.fixes)
            {
                for cap in placeholder.captures_iter(&text.replace("{{", "").replace("}}", "")) {
                    assert!(
                        names.contains(&cap[1]),
                        "{}: placeholder {{{}}} is not a field",
                        s.id,
                        &cap[1]
                    );
                }
            }
        }
    }

    #[test]
    fn fills_fields_and_leaves_unknown_ones_visible() {
        let mut f = BTreeMap::new();
        f.insert("node".to_owned(), "ReluBackward0".to_owned());
        assert_eq!(fill("of {node} at {version}", &f), "of ReluBackward0 at ?");
        assert_eq!(
            fill("a {{set}} and {not a field}", &f),
            "a {set} and {not a field}"
        );
    }

    #[test]
    fn rank_prefixes_and_glog_headers_are_stripped() {
        let kb = Kb::builtin();
        let mut sc = Scanner::new(kb);
        for line in [
            "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.",
            "[rank1]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600088 milliseconds before timing out.",
        ] {
            sc.feed(line.as_bytes());
        }
        let f = sc.findings();
        assert_eq!(f.len(), 1, "the same error on two ranks is one finding");
        assert_eq!(f[0].ranks, vec![0, 1]);
        let e = f[0].explanation.as_ref().unwrap();
        assert_eq!(e.fields["op"], "BROADCAST");
        assert_eq!(e.fields["timeout_ms"], "600000");
        assert_eq!(e.occurrences, 2);
    }

    #[test]
    fn the_users_frame_is_the_location() {
        let tb = "Traceback (most recent call last):\n  File \"/home/me/proj/train.py\", line 42, in <module>\n    loss.backward()\n  File \"/usr/lib/python3.11/site-packages/torch/_tensor.py\", line 623, in backward\n    torch.autograd.backward(\nRuntimeError: Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed).";
        let out = explain_text(tb);
        assert_eq!(out.findings.len(), 1);
        let loc = out.findings[0].location.as_ref().unwrap();
        assert_eq!(
            (loc.file.as_str(), loc.line),
            ("/home/me/proj/train.py", 42)
        );
        assert_eq!(out.findings[0].category, Category::StaleTensor);
    }

    #[test]
    fn native_frames_name_where_the_native_code_failed() {
        let log = "RuntimeError: CUDA error: device-side assert triggered\nException raised from c10_cuda_check_implementation at /__w/pytorch/pytorch/c10/cuda/CUDAException.cpp:43 (most recent call first):\nframe #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f2b1e2b1446 in /usr/lib/python3/site-packages/torch/lib/libc10.so)\nframe #1: c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::string const&) + 0x64 (0x7f2b1e25b6e4 in /usr/lib/python3/site-packages/torch/lib/libc10.so)\nframe #2: at::native::nll_loss_forward_out_cuda_template(at::Tensor const&) + 0x118 (0x7f2b1e5a5a18 in /usr/lib/python3/site-packages/torch/lib/libtorch_cuda.so)\nframe #3: <unknown function> + 0x1234 (0x7f2b in /usr/lib/libfoo.so)\n";
        let out = explain_text(log);
        let e = out.findings[0].explanation.as_ref().unwrap();
        assert_eq!(
            e.fields["native_frame"],
            "at::native::nll_loss_forward_out_cuda_template(at::Tensor const&) in libtorch_cuda.so"
        );
    }

    #[test]
    fn garbage_never_panics() {
        let kb = Kb::builtin();
        let mut sc = Scanner::new(kb);
        for bytes in [
            &b"\xff\xfe\x00\x01"[..],
            b"",
            b"[rank",
            b"[E] ",
            b"  File \"",
            &[b'x'; 50_000],
        ] {
            sc.feed(bytes);
        }
        assert!(sc.findings().is_empty());
    }
}
