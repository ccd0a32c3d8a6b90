//! Property tests: any bytes, any mix of log lines, never a panic; known lines still found.

use gradsleuth_explain::{Kb, Scanner};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(lines in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..20)) {
        let mut sc = Scanner::new(Kb::builtin());
        for l in &lines {
            sc.feed(l);
        }
        let _ = sc.findings();
    }

    #[test]
    fn noise_around_a_known_error_does_not_hide_it(prefix in "[ -~]{0,40}", noise in proptest::collection::vec("[ -~]{0,80}", 0..10)) {
        let mut sc = Scanner::new(Kb::builtin());
        for n in &noise {
            sc.feed(n.as_bytes());
        }
        let line = format!("{prefix}RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x5 and 4x3)");
        sc.feed(line.as_bytes());
        prop_assert!(sc.findings().iter().any(|f| f.code == "GS452"));
    }
}
