//! Fuzzing the parse-and-check path with proptest: every file of the seed corpus (the case
//! corpus's training scripts, `tests/cases/*/train.py`, and the grammar's corners in
//! `fuzz/corpus/`), mutated by deleting,
//! duplicating, inserting, swapping and truncating, and arbitrary text. The property:
//! `lint_source` returns (findings or a syntax error) and never panics. Shrunk failures are
//! kept in `proptest-regressions/` next to this file and replayed first.

use std::path::PathBuf;

use proptest::prelude::*;

fn corpus() -> Vec<String> {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(crate_dir.join("fuzz/corpus"))
        .expect("fuzz corpus")
        .map(|e| e.unwrap().path())
        .collect();
    let cases = crate_dir.join("../../tests/cases");
    files.extend(
        std::fs::read_dir(&cases)
            .expect("the case corpus")
            .map(|e| e.unwrap().path().join("train.py"))
            .filter(|p| p.exists()),
    );
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize, usize),
    Duplicate(usize, usize),
    Insert(usize, String),
    Truncate(usize),
    SwapLines(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let token = prop_oneof![
        Just("(".to_owned()),
        Just(")".to_owned()),
        Just(":".to_owned()),
        Just("\n    ".to_owned()),
        Just(".detach()".to_owned()),
        Just("with torch.no_grad():\n".to_owned()),
        Just("self.x = [nn.Linear(1, 1)]".to_owned()),
        Just("loss.backward()".to_owned()),
        Just("f\"{".to_owned()),
        Just("\"\"\"".to_owned()),
        Just("\u{00e9}\u{1F600}".to_owned()),
        "[ -~]{0,12}",
    ];
    prop_oneof![
        (any::<usize>(), 0usize..200).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), 0usize..400).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
        (any::<usize>(), token).prop_map(|(a, t)| Mutation::Insert(a, t)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
    ]
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(src: &str, m: &Mutation) -> String {
    let at = |a: usize| floor_boundary(src, a % (src.len() + 1));
    match m {
        Mutation::Delete(a, n) => {
            let s = at(*a);
            let e = floor_boundary(src, s + n);
            format!("{}{}", &src[..s], &src[e..])
        }
        Mutation::Duplicate(a, n) => {
            let s = at(*a);
            let e = floor_boundary(src, s + n);
            format!("{}{}{}", &src[..e], &src[s..e], &src[e..])
        }
        Mutation::Insert(a, t) => {
            let s = at(*a);
            format!("{}{}{}", &src[..s], t, &src[s..])
        }
        Mutation::Truncate(a) => src[..at(*a)].to_owned(),
        Mutation::SwapLines(a, b) => {
            let mut lines: Vec<&str> = src.lines().collect();
            if !lines.is_empty() {
                let (i, j) = (a % lines.len(), b % lines.len());
                lines.swap(i, j);
            }
            lines.join("\n")
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn mutated_training_code_never_panics(seed in any::<usize>(), muts in proptest::collection::vec(mutation(), 1..6)) {
        let corpus = corpus();
        let mut src = corpus[seed % corpus.len()].clone();
        for m in &muts {
            src = apply(&src, m);
        }
        let _ = gradsleuth_lint::lint_source("fuzz.py", &src);
    }

    #[test]
    fn arbitrary_text_never_panics(src in "(?s).{0,400}") {
        let _ = gradsleuth_lint::lint_source("fuzz.py", &src);
    }
}

#[test]
fn the_corpus_parses() {
    let corpus = corpus();
    assert!(corpus.len() >= 60);
    for src in &corpus {
        gradsleuth_lint::lint_source("seed.py", src).expect("seed files are valid Python");
    }
}

#[test]
fn a_ten_megabyte_generated_file_is_checked() {
    let mut src = String::from("import torch\nimport torch.nn as nn\n\n");
    let mut i = 0;
    while src.len() < 10 << 20 {
        src.push_str(&format!(
            "class Block{i}(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(8, 8)\n\n    def forward(self, x):\n        h = torch.sigmoid(self.fc(x))\n        return h * x + {i}\n\n\n"
        ));
        i += 1;
    }
    src.push_str("class Bad(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.layers = [nn.Linear(2, 2)]\n");
    let found = gradsleuth_lint::lint_source("big.py", &src).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].code, "GS301");
}
