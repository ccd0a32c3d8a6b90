//! Source lookups for findings: the tracer knows *which* function or class a problem lives in
//! (file and first line, from Python's code objects); this crate finds the exact line a user
//! must change inside it, and fills snippets so a saved capture renders without the files.
//!
//! It reads text only (lossily for non-UTF-8 files) and never fails: a missing file just
//! yields no snippet. Files are cached per [`SourceCache`] so a report touching the same
//! module many times reads it once.

use std::collections::HashMap;
use std::path::Path;

use gradsleuth_model::Location;

/// Lines of files read so far.
#[derive(Default)]
pub struct SourceCache {
    files: HashMap<String, Option<Vec<String>>>,
}

impl SourceCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The file's lines, or None if it cannot be read.
    pub fn lines(&mut self, file: &str) -> Option<&[String]> {
        self.files
            .entry(file.to_owned())
            .or_insert_with(|| {
                let bytes = std::fs::read(Path::new(file)).ok()?;
                let text = String::from_utf8_lossy(&bytes);
                Some(text.lines().map(str::to_owned).collect())
            })
            .as_deref()
    }

    /// The first line of the definition of class `qualname` (its first decorator, as Python's
    /// `inspect` counts it), found from the text, not by parsing the module: the `class NAME`
    /// header nearest above `below` (the first line of one of the class's own methods), or
    /// without such a hint the only header of that name in the file (None when ambiguous).
    pub fn class_line(&mut self, file: &str, qualname: &str, below: Option<u32>) -> Option<u32> {
        let name = qualname.rsplit('.').next()?;
        let lines = self.lines(file)?;
        let is_header = |l: &str| {
            let t = l.trim_start();
            let rest = t.strip_prefix("class")?;
            let rest = rest
                .strip_prefix(|c: char| c == ' ' || c == '\t')?
                .trim_start();
            let after = rest.strip_prefix(name)?;
            after
                .trim_start()
                .starts_with(['(', ':'])
                .then_some(l.len() - t.len())
        };
        let end = below.map_or(lines.len(), |b| {
            (b as usize).saturating_sub(1).min(lines.len())
        });
        let mut found = (0..end).filter_map(|i| is_header(&lines[i]).map(|ind| (i, ind)));
        let (i, indent) = match below {
            Some(_) => found.next_back()?,
            None => {
                let first = found.next()?;
                if found.next().is_some() {
                    return None;
                }
                first
            }
        };
        // Decorators above, each possibly spanning lines (deeper-indented arguments, blank
        // lines inside a string, a closing bracket at the header's indent): the top is the
        // last `@` reached before a line that can only be another statement.
        let mut top = i;
        let mut j = i;
        while j > 0 {
            let l = &lines[j - 1];
            let t = l.trim_start();
            let ind = l.len() - t.len();
            if t.is_empty() {
                j -= 1;
                continue;
            }
            if ind == indent && t.starts_with('@') {
                top = j - 1;
            } else if !(ind > indent || (ind == indent && t.starts_with([')', ']', '}']))) {
                break;
            }
            j -= 1;
        }
        Some(top as u32 + 1)
    }

    /// Line `line` (1-based), without its newline.
    pub fn line(&mut self, file: &str, line: u32) -> Option<String> {
        let lines = self.lines(file)?;
        lines.get((line as usize).checked_sub(1)?).cloned()
    }

    /// Fills `snippet` from the file when it is missing.
    pub fn fill_snippet(&mut self, loc: &mut Location) {
        if loc.snippet.is_none() {
            loc.snippet = self
                .line(&loc.file, loc.line)
                .map(|l| l.trim_end().to_owned());
        }
    }

    /// The extent `[first, last]` of the block (a `def` or `class`) that starts at `first`:
    /// every following line indented deeper than the header, blank lines and comments inside.
    pub fn block_extent(&mut self, file: &str, first: u32) -> Option<(u32, u32)> {
        let lines = self.lines(file)?;
        let start = (first as usize).checked_sub(1)?;
        // Decorators come before the header: skip to the `def`/`class` line.
        let header = (start..lines.len()).find(|&i| {
            let t = lines[i].trim_start();
            t.starts_with("def ") || t.starts_with("async def ") || t.starts_with("class ")
        })?;
        let indent = indentation(&lines[header]);
        let mut last = header;
        // A header may span lines (long signatures): continue until the line ending with ':'.
        let mut i = header;
        while i < lines.len() && !strip_comment(&lines[i]).trim_end().ends_with(':') {
            i += 1;
            last = i;
        }
        for (j, l) in lines.iter().enumerate().skip(i + 1) {
            let t = l.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if indentation(l) <= indent {
                break;
            }
            last = j;
        }
        Some((header as u32 + 1, last as u32 + 1))
    }

    /// Inside the block starting at `first`, the first line matching `pred` (1-based).
    pub fn find_in_block(
        &mut self,
        file: &str,
        first: u32,
        pred: impl Fn(&str) -> bool,
    ) -> Option<u32> {
        let (a, b) = self.block_extent(file, first)?;
        let lines = self.lines(file)?;
        (a..=b).find(|&n| {
            let l = &lines[n as usize - 1];
            pred(strip_comment(l))
        })
    }

    /// Where `self.<attr>` is assigned inside a class body (its methods included), e.g.
    /// `self.heads = [nn.Linear(...)]` or `self.register_buffer("attr", ...)`.
    pub fn attribute_assignment(
        &mut self,
        file: &str,
        class_first: u32,
        attr: &str,
    ) -> Option<Location> {
        // `self.x = None` in one branch is a placeholder, not where the tensor comes from
        // (`if not pos_embed: self.pos_embed = None / else: register_buffer(...)`).
        let placeholder = |l: &str| {
            let l = strip_comment(l).trim_end();
            l.ends_with("= None") || l.ends_with("=None")
        };
        // The class itself, then its base classes defined in the same file (a mixin's
        // `__init__`: PEFT's `LoraLayer` filling `self.lora_A` for `class Linear(nn.Module,
        // LoraLayer)`), nearest first.
        let mut classes = vec![class_first];
        let mut i = 0;
        while i < classes.len() && classes.len() < 8 {
            for base in self.base_classes(file, classes[i]) {
                if !classes.contains(&base) {
                    classes.push(base);
                }
            }
            i += 1;
        }
        let line = classes.iter().find_map(|&c| {
            self.find_in_block(file, c, |l| assigns_attr(l, attr) && !placeholder(l))
        });
        let line = line.or_else(|| {
            classes
                .iter()
                .find_map(|&c| self.find_in_block(file, c, |l| assigns_attr(l, attr)))
        })?;
        Some(self.location(file, line))
    }

    /// The first lines of the base classes (defined in the same file, at the top level) of the
    /// class whose header is at `class_first`.
    fn base_classes(&mut self, file: &str, class_first: u32) -> Vec<u32> {
        let Some(header) = self.statement(file, class_first) else {
            return Vec::new();
        };
        let Some(open) = header.find('(') else {
            return Vec::new();
        };
        let close = header.rfind(')').unwrap_or(header.len());
        let names: Vec<String> = header[open + 1..close.max(open + 1)]
            .split(',')
            .map(str::trim)
            .filter(|b| !b.contains('=') && !b.is_empty())
            .map(|b| b.rsplit('.').next().unwrap_or(b).to_owned())
            .collect();
        let Some(lines) = self.lines(file) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|n| {
                let head = format!("class {n}");
                lines.iter().position(|l| {
                    l.strip_prefix(&head)
                        .is_some_and(|rest| rest.starts_with('(') || rest.starts_with(':'))
                })
            })
            .map(|i| i as u32 + 1)
            .collect()
    }

    /// The line that disabled gradient recording around `line`: `line` itself, or going up
    /// through the enclosing function, a `with torch.no_grad()` / `inference_mode()` /
    /// `set_grad_enabled(False)` whose block contains `line`, or a decorator of the function.
    pub fn grad_disabler(&mut self, file: &str, line: u32) -> Option<u32> {
        let lines = self.lines(file)?;
        // The line itself: `torch.no_grad()(fn)(x)`, a one-line `with`.
        if lines
            .get((line as usize).wrapping_sub(1))
            .is_some_and(|l| disables(l))
        {
            return Some(line);
        }
        for i in enclosing(lines, line) {
            let t = lines[i].trim_start();
            if (t.starts_with("with ") || t.starts_with("async with ")) && disables(t) {
                return Some(i as u32 + 1);
            }
            if t.starts_with("def ") || t.starts_with("async def ") {
                // Decorators directly above the def.
                let mut j = i;
                while j > 0 && lines[j - 1].trim_start().starts_with('@') {
                    j -= 1;
                    if disables(&lines[j]) {
                        return Some(j as u32 + 1);
                    }
                }
                return None;
            }
        }
        None
    }

    /// The line of `file` that turned gradient checkpointing on for a model, for a forward
    /// called at `line` that a library checkpoints: a call of `gradient_checkpointing_enable(`
    /// or `activation_checkpointing_enable(`, or a `gradient_checkpointing=True` argument (a
    /// Hugging Face `TrainingArguments`); the last one above `line`, else the first below it.
    pub fn checkpoint_enabler(&mut self, file: &str, line: u32) -> Option<u32> {
        let lines = self.lines(file)?;
        let enables = |l: &str| {
            let l = strip_comment(l);
            l.contains("gradient_checkpointing_enable(")
                || l.contains("activation_checkpointing_enable(")
                || l.replace(' ', "").contains("gradient_checkpointing=True")
        };
        let found: Vec<u32> = (0..lines.len())
            .filter(|&i| enables(&lines[i]))
            .map(|i| i as u32 + 1)
            .collect();
        found
            .iter()
            .rev()
            .find(|&&l| l < line)
            .or_else(|| found.first())
            .copied()
    }

    /// The filter that chose an optimizer's parameters, for the optimizer built at `line`: in
    /// its function (or the 60 lines above it at module level), the last line up to the end of
    /// its statement that selects from `parameters()`/`named_parameters()` with a condition: a
    /// comprehension's `if` (on that line or the next two of a multi-line one), a `filter(`, or
    /// the first `if` inside a `for ... in ...parameters():` loop.
    pub fn parameter_filter(&mut self, file: &str, line: u32) -> Option<u32> {
        let lines = self.lines(file)?;
        let at = (line as usize)
            .checked_sub(1)
            .filter(|i| *i < lines.len())?;
        let def = enclosing(lines, line).find(|&i| {
            let t = lines[i].trim_start();
            t.starts_with("def ") || t.starts_with("async def ")
        });
        let start = def.unwrap_or(at.saturating_sub(60));
        // The optimizer's statement may continue on the next lines (an open bracket).
        let end = statement_end(lines, at, 20);
        let selects = |l: &str| l.contains("parameters()");
        let mut found = None;
        for i in start..=end.min(lines.len() - 1) {
            let l = strip_comment(&lines[i]);
            if !selects(l) {
                continue;
            }
            let t = l.trim_start();
            if t.starts_with("for ") && t.trim_end().ends_with(':') {
                let indent = indentation(&lines[i]);
                let body = (i + 1..lines.len().min(i + 30))
                    .take_while(|&j| {
                        let b = lines[j].trim();
                        b.is_empty() || b.starts_with('#') || indentation(&lines[j]) > indent
                    })
                    .find(|&j| lines[j].trim_start().starts_with("if "));
                if let Some(j) = body {
                    found = Some(j);
                }
                continue;
            }
            if l.contains("filter(") {
                found = Some(i);
                continue;
            }
            if let Some(j) =
                (i..(i + 3).min(lines.len())).find(|&j| strip_comment(&lines[j]).contains(" if "))
            {
                found = Some(j);
            }
        }
        found.map(|i| i as u32 + 1)
    }

    /// The branch that decides whether `line` runs: going up through the enclosing function,
    /// the nearest `if`/`elif`/`else`/`while`/`for`/`case` whose block contains `line`.
    pub fn enclosing_branch(&mut self, file: &str, line: u32) -> Option<u32> {
        let lines = self.lines(file)?;
        for i in enclosing(lines, line) {
            let word = lines[i]
                .trim_start()
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
                .unwrap_or("");
            match word {
                "if" | "elif" | "else" | "while" | "for" | "case" => return Some(i as u32 + 1),
                "def" | "class" | "async" => return None,
                _ => {}
            }
        }
        None
    }

    /// A random draw that decides whether `line` runs (LayerDrop, stochastic depth): going up
    /// from `line` to its function's `def`, the nearest line that draws a random number or
    /// names a skip rate (`torch.rand`, `random.random()`, `bernoulli`, `layerdrop`,
    /// `drop_path`, `stochastic_depth`).
    pub fn random_gate(&mut self, file: &str, line: u32) -> Option<u32> {
        let lines = self.lines(file)?;
        let def = enclosing(lines, line).find(|&i| {
            let t = lines[i].trim_start();
            t.starts_with("def ") || t.starts_with("async def ")
        })?;
        let draws = |l: &str| {
            let l = strip_comment(l).to_ascii_lowercase();
            [
                "rand(",
                "rand([",
                "random()",
                "uniform(",
                "bernoulli",
                "layerdrop",
                "layer_drop",
                "drop_path",
                "stochastic_depth",
            ]
            .iter()
            .any(|k| l.contains(k))
        };
        (def..(line as usize).min(lines.len()))
            .rev()
            .find(|&i| draws(&lines[i]))
            .map(|i| i as u32 + 1)
    }

    /// An optimizer step later in the loop that runs `line` (a `backward()`): the first line
    /// after it, in the innermost enclosing `for`/`while` body, calling `.step(` on something
    /// that is not a learning-rate schedule (`optimizer.step()`, `scaler.step(opt)`, a step
    /// under `if (i + 1) % accumulate == 0:`). None outside a loop, or with no step after it.
    pub fn step_later_in_loop(&mut self, file: &str, line: u32) -> Option<u32> {
        let lines = self.lines(file)?;
        let head = enclosing(lines, line).find(|&i| {
            let t = lines[i].trim_start();
            t.starts_with("for ") || t.starts_with("while ") || t.starts_with("async for ")
        })?;
        let indent = indentation(&lines[head]);
        let steps = |l: &str| {
            let code = strip_comment(l);
            code.match_indices(".step(").any(|(i, _)| {
                let receiver = code[..i]
                    .rsplit(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                    .next()
                    .unwrap_or("")
                    .to_ascii_lowercase();
                !receiver.is_empty() && !receiver.contains("sched") && !receiver.ends_with("lr")
            })
        };
        (line as usize..lines.len())
            .take_while(|&i| {
                let t = lines[i].trim();
                t.is_empty() || t.starts_with('#') || indentation(&lines[i]) > indent
            })
            .find(|&i| steps(&lines[i]))
            .map(|i| i as u32 + 1)
    }

    /// The first line of the function defined at `def_line` that calls the submodule
    /// `self.<attr>`: `self.attr(...)`, `self.attr[i](...)`, or, in a loop over it
    /// (`for layer in self.attr:`, `for i, layer in enumerate(self.attr):`), the loop variable
    /// called (`layer(...)`). None when the function has no such call.
    pub fn submodule_call(&mut self, file: &str, def_line: u32, attr: &str) -> Option<u32> {
        let lines = self.lines(file)?;
        let def = (def_line as usize).checked_sub(1)?;
        let indent = indentation(lines.get(def)?);
        let own = format!("self.{attr}");
        let direct = |l: &str| {
            l.match_indices(&own).any(|(i, _)| {
                let rest = &l[i + own.len()..];
                let named =
                    !l[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.');
                named && (rest.starts_with('(') || (rest.starts_with('[') && rest.contains("](")))
            })
        };
        // Loop variables bound to the container's items, with the loop's indentation.
        let mut items: Vec<(String, usize)> = Vec::new();
        // The body starts after the signature, which may span lines (`def forward(\n self,`).
        let body = statement_end(lines, def, 40) + 1;
        for (i, line) in lines.iter().enumerate().skip(body) {
            let t = strip_comment(line).trim();
            if t.is_empty() {
                continue;
            }
            let ind = indentation(line);
            if ind <= indent {
                break;
            }
            items.retain(|(_, loop_indent)| ind > *loop_indent);
            if direct(t) {
                return Some(i as u32 + 1);
            }
            if items.iter().any(|(v, _)| {
                t.match_indices(&format!("{v}(")).any(|(j, _)| {
                    !t[..j].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.')
                })
            }) {
                return Some(i as u32 + 1);
            }
            if let Some(head) = t.strip_prefix("for ").and_then(|h| h.split_once(" in ")) {
                let iter = head.1.trim_end_matches(':').trim();
                let over = iter == own
                    || iter
                        .strip_prefix("enumerate(")
                        .is_some_and(|r| r.trim_end_matches(')').trim() == own);
                if over {
                    if let Some(v) = head.0.rsplit(',').next() {
                        let v = v.trim().trim_end_matches(')').trim();
                        if !v.is_empty() && v.chars().all(|c| c.is_alphanumeric() || c == '_') {
                            items.push((v.to_owned(), ind));
                        }
                    }
                }
            }
        }
        None
    }

    /// The condition that decides whether `line` runs: a conditional expression on the line
    /// itself (`aux = self.aux(x) if train else None`), or the nearest `if`/`elif`/`while`/
    /// `case` header enclosing it in its function (for an `else:`, the `if` it belongs to).
    /// None when the line runs unconditionally in its function.
    pub fn branch(&mut self, file: &str, line: u32) -> Option<u32> {
        let lines = self.lines(file)?;
        let at = (line as usize)
            .checked_sub(1)
            .filter(|i| *i < lines.len())?;
        let own = strip_comment(&lines[at]);
        if own.contains(" if ") && own.contains(" else ") {
            return Some(line);
        }
        let starts = |i: usize, heads: &[&str]| {
            let t = lines[i].trim_start();
            heads.iter().any(|h| t.starts_with(h))
        };
        for i in enclosing(lines, line) {
            if starts(i, &["def ", "async def ", "class "]) {
                return None;
            }
            if starts(i, &["if ", "elif ", "while ", "case "]) {
                return Some(i as u32 + 1);
            }
            if starts(i, &["else:", "else :"]) {
                let indent = indentation(&lines[i]);
                return (0..i)
                    .rev()
                    .find(|&j| indentation(&lines[j]) == indent && starts(j, &["if ", "elif "]))
                    .map(|j| j as u32 + 1);
            }
        }
        None
    }

    /// Whether the value a call at `line` assigns (`out = self.decoder(...)`) is ever read in
    /// its function: [`DeadStore::Overwritten`] when the next mention of the name, at the
    /// call's indentation or less, assigns it anew without reading it (`out = tgt`);
    /// [`DeadStore::NeverUsed`] when nothing after the call (nor, in a loop, before it) reads
    /// it. None when it is read, when the call assigns no single name, or when unsure (a
    /// rebinding inside a branch).
    pub fn dead_store(&mut self, file: &str, line: u32) -> Option<DeadStore> {
        let lines = self.lines(file)?;
        let at = (line as usize)
            .checked_sub(1)
            .filter(|i| *i < lines.len())?;
        let text = strip_comment(&lines[at]);
        let (target, rhs) = text.split_once('=')?;
        let name = target.trim();
        if rhs.starts_with('=')
            || name.is_empty()
            || !name.chars().all(|c| c.is_alphanumeric() || c == '_')
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            return None;
        }
        let def = enclosing(lines, line).find(|&i| {
            let t = lines[i].trim_start();
            t.starts_with("def ") || t.starts_with("async def ")
        })?;
        let loop_head = enclosing(lines, line).take_while(|&i| i > def).find(|&i| {
            let t = lines[i].trim_start();
            t.starts_with("for ") || t.starts_with("while ") || t.starts_with("async for ")
        });
        let def_indent = indentation(&lines[def]);
        let call_indent = indentation(&lines[at]);
        // The end of the call's statement: brackets balanced.
        let end = statement_end(lines, at, usize::MAX);
        let mentions = |l: &str| word_positions(strip_comment(l), name);
        // In a loop, the next iteration may read it above the call.
        if let Some(head) = loop_head {
            if (head..at).any(|i| !mentions(&lines[i]).is_empty()) {
                return None;
            }
        }
        for (i, l) in lines.iter().enumerate().skip(end + 1) {
            let t = l.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if indentation(l) <= def_indent {
                break;
            }
            let found = mentions(l);
            if found.is_empty() {
                continue;
            }
            // `name = ...` whose right side does not read it.
            let rest = strip_comment(l)
                .trim_start()
                .strip_prefix(name)
                .map(str::trim_start);
            let rebinds = found.len() == 1
                && rest.is_some_and(|r| r.starts_with('=') && !r.starts_with("=="));
            if rebinds && indentation(l) <= call_indent {
                return Some(DeadStore::Overwritten(i as u32 + 1, name.to_owned()));
            }
            return None;
        }
        Some(DeadStore::NeverUsed(name.to_owned()))
    }

    /// The first line of `file` that assigns an attribute named `attr` of some object
    /// (`model.classifier = nn.Linear(...)`, `net.backbone.fc = ...`), or the item `attr` of a
    /// container when `attr` is an index (`model.features[3] = ...`), reached through
    /// attributes, indices and keys (`model.model.decoder.layers[1].fc1 = ...`,
    /// `model.heads["cls"].proj = ...`), outside `self.` code: where a script replaces a layer.
    pub fn attribute_replacement(&mut self, file: &str, attr: &str) -> Option<Location> {
        let lines = self.lines(file)?;
        let needles = if attr.chars().all(|c| c.is_ascii_digit()) {
            vec![format!("[{attr}]"), format!(".{attr}")]
        } else {
            vec![format!(".{attr}")]
        };
        // An access path: names, dots, and brackets holding an integer or a quoted key.
        let path = |p: &str| {
            p.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && p.chars()
                    .all(|c| c.is_alphanumeric() || "_.[]-'\"".contains(c))
                && bracket_balance(p) == 0
        };
        let i = lines.iter().position(|l| {
            let code = strip_comment(l).trim_start();
            let Some(eq) = code.find('=') else {
                return false;
            };
            let target = code[..eq].trim_end();
            !code[eq..].starts_with("==")
                && !target.ends_with(['!', '<', '>', '+', '-', '*', '/'])
                && !target.starts_with("self.")
                && needles
                    .iter()
                    .any(|n| target.strip_suffix(n.as_str()).is_some_and(&path))
        })?;
        Some(self.location(file, i as u32 + 1))
    }

    /// A location with its snippet and the column of the first non-blank character.
    /// The whole statement starting at `line`, its continuation lines joined into one (open
    /// brackets closed, comments dropped): `self.convs = [nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)]`.
    pub fn statement(&mut self, file: &str, line: u32) -> Option<String> {
        let lines = self.lines(file)?;
        let at = (line as usize)
            .checked_sub(1)
            .filter(|i| *i < lines.len())?;
        let mut out = String::new();
        let mut depth: i32 = 0;
        for l in lines.iter().skip(at).take(50) {
            let part = strip_comment(l).trim();
            let glue = !(out.is_empty()
                || out.ends_with(['(', '[', '{'])
                || part.starts_with([')', ']', '}']));
            if glue {
                out.push(' ');
            }
            out.push_str(part.trim_end_matches('\\').trim_end());
            depth += bracket_balance(part);
            if depth <= 0 && !part.ends_with('\\') {
                return Some(out);
            }
        }
        None
    }

    pub fn location(&mut self, file: &str, line: u32) -> Location {
        let mut loc = Location::new(file, line);
        if let Some(text) = self.line(file, line) {
            loc.column = Some(indentation(&text) as u32 + 1);
            loc.snippet = Some(text.trim_end().to_owned());
        }
        loc
    }
}

/// How a call's assigned value dies unread (see [`SourceCache::dead_store`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadStore {
    /// Rebound at this line (1-based) before any read.
    Overwritten(u32, String),
    /// Never read.
    NeverUsed(String),
}

/// Byte offsets where `word` stands in `line` as a whole identifier (not an attribute).
fn word_positions(line: &str, word: &str) -> Vec<usize> {
    let b = line.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    line.match_indices(word)
        .map(|(i, _)| i)
        .filter(|&i| {
            let before = i.checked_sub(1).map(|j| b[j]);
            let after = b.get(i + word.len()).copied();
            !before.is_some_and(|c| ident(c) || c == b'.') && !after.is_some_and(ident)
        })
        .collect()
}

/// Indices of the lines that open the blocks around `line` (1-based), innermost first: going
/// up, each non-blank, non-comment line indented less than the last one found. A line that
/// starts with a closing bracket (`):` ending a multi-line signature, `]` or `}` ending a
/// literal) continues an expression and opens nothing.
fn enclosing(lines: &[String], line: u32) -> impl Iterator<Item = usize> + '_ {
    let start = (line as usize).checked_sub(1).filter(|i| *i < lines.len());
    let mut indent = start.map_or(0, |i| indentation(&lines[i]));
    let mut i = start.unwrap_or(0);
    std::iter::from_fn(move || {
        start?;
        while i > 0 {
            i -= 1;
            let l = &lines[i];
            let t = l.trim_start();
            if t.is_empty()
                || t.starts_with('#')
                || t.starts_with([')', ']', '}'])
                || indentation(l) >= indent
            {
                continue;
            }
            indent = indentation(l);
            return Some(i);
        }
        None
    })
}

/// Brackets a line opens minus those it closes (comments excluded).
fn bracket_balance(line: &str) -> i32 {
    strip_comment(line)
        .chars()
        .map(|c| match c {
            '(' | '[' | '{' => 1,
            ')' | ']' | '}' => -1,
            _ => 0,
        })
        .sum()
}

/// The last line (0-based) of the statement starting at `at`: where its brackets balance,
/// looking at most `max` lines further.
fn statement_end(lines: &[String], at: usize, max: usize) -> usize {
    let mut depth = 0;
    let mut end = at;
    for (i, l) in lines.iter().enumerate().skip(at) {
        depth += bracket_balance(l);
        end = i;
        if depth <= 0 || i - at >= max {
            break;
        }
    }
    end
}

fn indentation(line: &str) -> usize {
    line.chars().take_while(|c| *c == ' ' || *c == '\t').count()
}

/// Whether a line of code turns gradient recording off.
fn disables(l: &str) -> bool {
    let l = strip_comment(l);
    l.contains("no_grad") || l.contains("inference_mode") || l.contains("set_grad_enabled(False")
}

/// The line without a trailing `#` comment (quotes respected roughly: a `#` inside a string
/// literal on the line is kept).
pub fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev = '\0';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q && prev != '\\' => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' => return &line[..i],
            None => {}
        }
        prev = c;
    }
    line
}

/// Does this line bind attribute `attr` of `self` (plain, annotated or augmented assignment,
/// `setattr(self, "attr", ...)`, `register_buffer("attr", ...)`, `register_parameter`)?
pub fn assigns_attr(line: &str, attr: &str) -> bool {
    let t = line.trim_start();
    let target = format!("self.{attr}");
    if let Some(rest) = t.strip_prefix(&target) {
        let rest = rest.trim_start();
        // `self.attr = ...`, `self.attr: T = ...`, but not `self.attr == ...` or `self.attr_x`.
        return (rest.starts_with('=') && !rest.starts_with("=="))
            || rest.starts_with(':')
            || (rest.starts_with(',') && t.contains('='));
    }
    for call in ["register_buffer(", "register_parameter(", "setattr(self,"] {
        if let Some(pos) = t.find(call) {
            let args = &t[pos + call.len()..];
            let args = args.trim_start();
            if args.starts_with(&format!("\"{attr}\"")) || args.starts_with(&format!("'{attr}'")) {
                return true;
            }
        }
    }
    false
}

/// Does this line construct `class` (`nn.Linear(`, `Linear(`, `torch.nn.Linear(`)?
pub fn constructs(line: &str, class: &str) -> bool {
    let mut from = 0;
    while let Some(pos) = line[from..].find(class) {
        let at = from + pos;
        let before = line[..at].chars().next_back();
        let after = line[at + class.len()..].trim_start();
        let ident_before = before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !ident_before && after.starts_with('(') {
            return true;
        }
        from = at + class.len();
    }
    false
}

#[cfg(test)]
mod class_line_tests {
    #[test]
    fn finds_a_class_by_the_text_decorators_and_nesting_included() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.py");
        std::fs::write(
            &f,
            "import torch\n\n\nclass Block(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n\n@register\n@other(\n    \"\"\"a\n\n    b\"\"\"\n)\nclass Head (torch.nn.Module) :\n    class Block:\n        def f(self):\n            pass\n\n    def forward(self, x):\n        return x\n\nclass Blocky:\n    pass\n",
        )
        .unwrap();
        let f = f.to_str().unwrap();
        let mut s = super::SourceCache::new();
        // the nearest header above the first method
        assert_eq!(s.class_line(f, "Block", Some(5)), Some(4));
        assert_eq!(s.class_line(f, "Head", Some(20)), Some(9));
        assert_eq!(s.class_line(f, "Head.Block", Some(17)), Some(16));
        // no method: only an unambiguous name
        assert_eq!(s.class_line(f, "Blocky", None), Some(23));
        assert_eq!(s.class_line(f, "Block", None), None);
        assert_eq!(s.class_line(f, "Missing", None), None);
        assert_eq!(s.class_line("/no/such/file.py", "Block", None), None);
    }
}

#[cfg(test)]
mod branch_tests {
    #[test]
    fn finds_the_branch_around_a_call() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.py");
        std::fs::write(
            &f,
            "class M:\n    def forward(self, x, y):\n        h = self.body(x)\n        if (y == 3).any():\n            # rare class\n            h = h + self.aux(h)\n        return h\n",
        )
        .unwrap();
        let f = f.to_str().unwrap();
        let mut s = super::SourceCache::new();
        assert_eq!(s.enclosing_branch(f, 6), Some(4));
        assert_eq!(s.enclosing_branch(f, 3), None);
    }

    #[test]
    fn a_layer_replaced_by_the_script() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("train.py");
        std::fs::write(
            &f,
            "model = build()\nopt = SGD(model.parameters())\nif model.fc == None:\n    pass\nmodel.fc = nn.Linear(4, 2)  # new head\nself.fc = 3\n",
        )
        .unwrap();
        let f = f.to_str().unwrap();
        let mut s = super::SourceCache::new();
        assert_eq!(s.attribute_replacement(f, "fc").map(|l| l.line), Some(5));
        assert_eq!(s.attribute_replacement(f, "head"), None);
        // Reached through indices and keys; an index replaced in a container.
        std::fs::write(
            f,
            "opt = SGD(model.parameters())\nscores[i] = 0\nmodel.model.decoder.layers[1].fc1 = nn.Linear(4, 4)\nmodel.heads[\"cls\"].proj = nn.Linear(4, 2)\nmodel.features[3] = nn.Conv2d(3, 3, 1)\nx.fc2[: n] = 0\n",
        )
        .unwrap();
        let mut s = super::SourceCache::new();
        assert_eq!(s.attribute_replacement(f, "fc1").map(|l| l.line), Some(3));
        assert_eq!(s.attribute_replacement(f, "proj").map(|l| l.line), Some(4));
        assert_eq!(s.attribute_replacement(f, "3").map(|l| l.line), Some(5));
        // Not an index of a container read by a variable, nor a slice.
        assert_eq!(s.attribute_replacement(f, "i"), None);
        assert_eq!(s.attribute_replacement(f, "fc2"), None);
    }

    #[test]
    fn a_step_later_in_the_loop_of_a_backward() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("train.py");
        std::fs::write(
            &f,
            "for i, x in enumerate(data):
    with accelerator.accumulate(model):
        loss = model(x)
        accelerator.backward(loss)
        scheduler.step()
        if (i + 1) % 2 == 0:
            optimizer.step()  # applied every second batch
print('done')
for x in data:
    loss = model(x)
    loss.backward()
    lr_scheduler.step()
opt.step()
",
        )
        .unwrap();
        let f = f.to_str().unwrap();
        let mut s = super::SourceCache::new();
        assert_eq!(s.step_later_in_loop(f, 4), Some(7));
        // A schedule's step is no optimizer's, and a step after the loop is not in it.
        assert_eq!(s.step_later_in_loop(f, 11), None);
        assert_eq!(s.step_later_in_loop(f, 8), None);
    }

    #[test]
    fn a_submodules_call_in_a_function() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("model.py");
        std::fs::write(
            &f,
            "class Encoder(nn.Module):
    def forward(self, x):
        self.layers_seen = 0  # self.layers(x) in a comment
        for i, layer in enumerate(self.layers):
            skip = torch.rand([]) < self.layerdrop
            if not skip:
                x = layer(x)
        if self.use_aux:
            x = x + self.aux[0](x)
        return self.head(x)

    def other(
        self, x
    ):
        return self.proj(x)
",
        )
        .unwrap();
        let f = f.to_str().unwrap();
        let mut s = super::SourceCache::new();
        assert_eq!(s.submodule_call(f, 2, "layers"), Some(7));
        assert_eq!(s.branch(f, 7), Some(6));
        assert_eq!(s.submodule_call(f, 2, "aux"), Some(9));
        assert_eq!(s.submodule_call(f, 2, "head"), Some(10));
        assert_eq!(s.branch(f, 10), None);
        // Another method's call is not forward's.
        assert_eq!(s.submodule_call(f, 2, "proj"), None);
        assert_eq!(s.submodule_call(f, 12, "proj"), Some(15));
    }

    #[test]
    fn a_module_output_overwritten_or_never_read() {
        use super::DeadStore;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.py");
        std::fs::write(
            &f,
            "class T:\n    def forward(self, src, tgt):\n        memory = self.encoder(src)\n        output = self.decoder(\n            tgt, memory,\n        )\n        output = tgt\n        return output\n\n    def head(self, x):\n        feats = self.backbone(x)\n        return self.fc(x)\n\n    def fine(self, x):\n        h = self.a(x)\n        if x.any():\n            h = x\n        return h\n\n    def loop(self, x):\n        h = x\n        for b in self.blocks:\n            out = b(h)\n            h = out.relu()\n        return h\n",
        )
        .unwrap();
        let f = f.to_str().unwrap();
        let mut s = super::SourceCache::new();
        assert_eq!(s.dead_store(f, 3), None);
        assert_eq!(
            s.dead_store(f, 4),
            Some(DeadStore::Overwritten(7, "output".into()))
        );
        assert_eq!(
            s.dead_store(f, 11),
            Some(DeadStore::NeverUsed("feats".into()))
        );
        assert_eq!(
            s.dead_store(f, 15),
            None,
            "a rebinding inside a branch is not certain"
        );
        assert_eq!(s.dead_store(f, 23), None);
    }

    #[test]
    fn a_layerdrop_draw_is_found_above_a_multi_line_typed_signature() {
        // transformers' style: the signature's `):` is less indented than the body.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.py");
        std::fs::write(
            &f,
            "class Encoder:\n    def forward(\n        self,\n        h,\n    ):\n        for layer in self.layers:\n            p = torch.rand([])\n            if p >= self.drop:\n                h = layer(h)\n        return h\n",
        )
        .unwrap();
        let f = f.to_str().unwrap();
        let mut s = super::SourceCache::new();
        assert_eq!(s.random_gate(f, 9), Some(7));
        assert_eq!(s.enclosing_branch(f, 9), Some(8));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.py");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let p = path.to_string_lossy().into_owned();
        (dir, p)
    }

    const SRC: &str = "import torch\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.heads = [nn.Linear(4, 4) for _ in range(2)]  # bug\n        self.heads_count = 2\n        self.register_buffer(\"scale\", torch.ones(3))\n\n    def forward(self, x):\n        h = nn.Linear(4, 4)(x)\n        return h\n\nx = 1\n";

    #[test]
    fn finds_the_filter_that_chose_an_optimizers_parameters() {
        // A comprehension's condition on the next line of a multi-line group.
        let (_d, p) = file("def build(model):\n    no_decay = [\"bias\"]\n    groups = [\n        {\"params\": [p for n, p in model.named_parameters()\n                    if not any(nd in n for nd in no_decay)]},\n    ]\n    return torch.optim.AdamW(groups, lr=1e-3)\n");
        let mut c = SourceCache::new();
        assert_eq!(c.parameter_filter(&p, 7), Some(5));
        // Inside the optimizer's own call, and through `filter(`.
        let (_d, p) = file("opt = torch.optim.SGD(\n    filter(lambda p: p.ndim > 1, model.parameters()),\n    lr=0.1,\n)\n");
        assert_eq!(c.parameter_filter(&p, 1), Some(2));
        // A loop's `if`.
        let (_d, p) = file("def f(model):\n    decay = []\n    for n, p in model.named_parameters():\n        if n.endswith(\"weight\"):\n            decay.append(p)\n    return Adam(decay)\n");
        assert_eq!(c.parameter_filter(&p, 6), Some(4));
        // No condition: no filter.
        let (_d, p) = file("def f(model):\n    groups = [{\"params\": model.backbone.parameters()}]\n    return SGD(groups)\n");
        assert_eq!(c.parameter_filter(&p, 3), None);
    }

    #[test]
    fn a_statement_over_several_lines_is_joined_whole() {
        let (_d, p) = file("class M:\n    def __init__(self):\n        self.convs = [nn.Conv2d(1, 32, 3, 1),  # first\n                      nn.Conv2d(32, 64, 3, 1),\n        ]\n");
        let mut c = SourceCache::new();
        assert_eq!(
            c.statement(&p, 3).as_deref(),
            Some("self.convs = [nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1),]")
        );
        assert_eq!(c.statement(&p, 2).as_deref(), Some("def __init__(self):"));
    }

    #[test]
    fn finds_attribute_assignments_in_the_class() {
        let (_d, p) = file(SRC);
        let mut c = SourceCache::new();
        assert_eq!(c.block_extent(&p, 3), Some((3, 12)));
        assert_eq!(c.attribute_assignment(&p, 3, "heads").unwrap().line, 6);
        assert_eq!(c.attribute_assignment(&p, 3, "scale").unwrap().line, 8);
        assert!(c.attribute_assignment(&p, 3, "head").is_none());
        let loc = c.attribute_assignment(&p, 3, "heads_count").unwrap();
        assert_eq!((loc.line, loc.column), (7, Some(9)));
    }

    #[test]
    fn an_attribute_a_base_class_of_the_file_assigns() {
        let (_d, p) = file("class LoraLayer(BaseTunerLayer):\n    def __init__(self, base):\n        self.base_layer = base\n        self.lora_A = dict({})\n\n\nclass Linear(\n    nn.Module,\n    LoraLayer,\n):\n    def __init__(self, base):\n        super().__init__()\n        LoraLayer.__init__(self, base)\n        self.fan_in = False\n");
        let mut c = SourceCache::new();
        assert_eq!(c.attribute_assignment(&p, 7, "fan_in").unwrap().line, 14);
        assert_eq!(c.attribute_assignment(&p, 7, "lora_A").unwrap().line, 4);
        assert!(c.attribute_assignment(&p, 7, "lora_B").is_none());
    }

    #[test]
    fn the_branch_that_decides_whether_a_line_runs() {
        let (_d, p) = file("class M(nn.Module):\n    def forward(self, x, deep=False):\n        s = self.stem(x)\n        if deep:\n            return s, self.aux(s)\n        elif x.ndim > 3:\n            y = 1\n        else:\n            y = self.other(s)\n        z = self.tail(s) if self.training else None\n        return self.head(s)\n");
        let mut c = SourceCache::new();
        assert_eq!(c.branch(&p, 5), Some(4));
        assert_eq!(c.branch(&p, 9), Some(6));
        assert_eq!(c.branch(&p, 10), Some(10));
        assert_eq!(c.branch(&p, 11), None);
        assert_eq!(c.branch(&p, 3), None);
    }

    #[test]
    fn a_none_placeholder_is_not_where_the_tensor_is_assigned() {
        let (_d, p) = file("class M(nn.Module):\n    def __init__(self, pos):\n        if not pos:\n            self.pos_embed = None  # none\n        else:\n            self.register_buffer(\"pos_embed\", nn.Parameter(torch.zeros(4)))\n        self.cls = None\n");
        let mut c = SourceCache::new();
        assert_eq!(c.attribute_assignment(&p, 1, "pos_embed").unwrap().line, 6);
        // Only a placeholder: that line, rather than nothing.
        assert_eq!(c.attribute_assignment(&p, 1, "cls").unwrap().line, 7);
    }

    #[test]
    fn finds_constructions_inside_a_function() {
        let (_d, p) = file(SRC);
        let mut c = SourceCache::new();
        assert_eq!(
            c.find_in_block(&p, 10, |l| constructs(l, "Linear")),
            Some(11)
        );
        assert!(!constructs("x = MyLinear(3)", "Linear"));
        assert!(constructs("x = torch.nn.Linear (3)", "Linear"));
    }

    #[test]
    fn finds_the_line_that_disabled_grad() {
        let (_d, p) = file("@torch.no_grad()\ndef f(m, x):\n    return m(x)\n\ndef g(m, x):\n    y = m(x)\n    with torch.inference_mode():\n        z = m(y)\n        # comment\n        w = m(z)\n    v = torch.no_grad()(m)(w)\n    return m(v)  # not under no_grad\n");
        let mut c = SourceCache::new();
        assert_eq!(c.grad_disabler(&p, 3), Some(1));
        assert_eq!(c.grad_disabler(&p, 8), Some(7));
        assert_eq!(c.grad_disabler(&p, 10), Some(7));
        assert_eq!(c.grad_disabler(&p, 12), None);
        assert_eq!(c.grad_disabler(&p, 6), None);
        // The line itself turns it off (a decorator applied in place).
        assert_eq!(c.grad_disabler(&p, 11), Some(11));
    }

    #[test]
    fn missing_files_and_bad_lines_are_not_errors() {
        let mut c = SourceCache::new();
        assert!(c.line("/no/such/file.py", 3).is_none());
        let (_d, p) = file(SRC);
        assert!(c.line(&p, 0).is_none());
        assert!(c.line(&p, 999).is_none());
        assert!(c.block_extent(&p, 999).is_none());
    }

    #[test]
    fn comments_do_not_count() {
        assert!(
            !assigns_attr("# self.fc = nn.Linear(1, 1)", "fc")
                || strip_comment("# self.fc = 1").is_empty()
        );
        assert_eq!(strip_comment("x = '#'  # c"), "x = '#'  ");
        assert!(!assigns_attr("self.fc == 3", "fc"));
        assert!(assigns_attr("self.fc: nn.Linear = nn.Linear(1, 1)", "fc"));
        assert!(assigns_attr("setattr(self, 'fc', nn.Linear(1, 1))", "fc"));
    }
}

#[cfg(test)]
mod checkpoint_enabler_tests {
    #[test]
    fn finds_the_line_that_turned_checkpointing_on() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.py");
        std::fs::write(
            &f,
            "model = build()\n# model.gradient_checkpointing_enable()\nmodel = get_peft_model(model, cfg)\nmodel.gradient_checkpointing_enable(gradient_checkpointing_kwargs={})\nfor b in data:\n    loss = model(**b).loss\n",
        )
        .unwrap();
        let f = f.to_str().unwrap();
        let mut s = super::SourceCache::new();
        assert_eq!(s.checkpoint_enabler(f, 6), Some(4));
        let g = dir.path().join("u.py");
        std::fs::write(
            &g,
            "trainer.train()\nargs = TrainingArguments(out, gradient_checkpointing = True)\n",
        )
        .unwrap();
        assert_eq!(s.checkpoint_enabler(g.to_str().unwrap(), 1), Some(2));
        let h = dir.path().join("v.py");
        std::fs::write(&h, "y = checkpoint(block, x)\n").unwrap();
        assert_eq!(s.checkpoint_enabler(h.to_str().unwrap(), 1), None);
    }
}
