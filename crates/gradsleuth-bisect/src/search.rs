//! The search over an ordered list of candidates: index 0 is the good end, the last index
//! the bad end (both judged before the search starts). Each step tries the untried candidate
//! nearest the middle of what is still open; a candidate that cannot be judged (it does not
//! install, the script cannot start) is skipped, as `git bisect skip` does, and the answer
//! then names the range that could not be narrowed.

use serde::{Deserialize, Serialize};

/// What a candidate is, by the predicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Good,
    Bad,
    /// Could not be judged: not installable, or the run could not tell.
    Skip,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Good => "good",
            Verdict::Bad => "bad",
            Verdict::Skip => "skip",
        }
    }
}

/// A binary search with skips.
#[derive(Debug, Clone)]
pub struct Search {
    /// The newest known good index.
    good: usize,
    /// The oldest known bad index.
    bad: usize,
    skipped: Vec<bool>,
}

impl Search {
    /// A search over `n` candidates (at least 2), the first good and the last bad.
    pub fn new(n: usize) -> Search {
        let n = n.max(2);
        Search {
            good: 0,
            bad: n - 1,
            skipped: vec![false; n],
        }
    }

    /// The next candidate to try, or None when the search is over.
    pub fn next(&self) -> Option<usize> {
        let open: Vec<usize> = (self.good + 1..self.bad)
            .filter(|&i| !self.skipped[i])
            .collect();
        if open.is_empty() {
            return None;
        }
        let mid = (self.good + self.bad) as f64 / 2.0;
        open.into_iter().min_by(|&a, &b| {
            let da = (a as f64 - mid).abs();
            let db = (b as f64 - mid).abs();
            da.total_cmp(&db).then(a.cmp(&b))
        })
    }

    /// Records a candidate's verdict.
    pub fn record(&mut self, i: usize, verdict: Verdict) {
        if i >= self.skipped.len() {
            return;
        }
        match verdict {
            Verdict::Good if i > self.good && i < self.bad => self.good = i,
            Verdict::Bad if i < self.bad && i > self.good => self.bad = i,
            Verdict::Skip => self.skipped[i] = true,
            _ => {}
        }
    }

    /// (last good, first bad, candidates between them that were skipped). When the last is
    /// not empty, the first bad candidate is one of those skipped or the one named.
    pub fn result(&self) -> (usize, usize, Vec<usize>) {
        let between = (self.good + 1..self.bad)
            .filter(|&i| self.skipped[i])
            .collect();
        (self.good, self.bad, between)
    }

    /// Runs the whole search with `judge` (for tests and callers that judge synchronously).
    pub fn run(mut self, mut judge: impl FnMut(usize) -> Verdict) -> (usize, usize, Vec<usize>) {
        while let Some(i) = self.next() {
            let v = judge(i);
            self.record(i, v);
        }
        self.result()
    }
}

/// Where to look for a good start when none was given: the candidates just before the bad
/// end, then ever further back (1, 2, 4, 8, ... before it), ending at the oldest. `bad` is
/// the bad end's index in an oldest-first list.
pub fn backwards(bad: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut step = 1usize;
    while step <= bad {
        out.push(bad - step);
        step *= 2;
    }
    if bad > 0 && out.last() != Some(&0) {
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_bad_candidate_wherever_it_is() {
        for n in 2..40 {
            for first_bad in 1..n {
                let mut tried = 0;
                let (good, bad, skipped) = Search::new(n).run(|i| {
                    tried += 1;
                    if i >= first_bad {
                        Verdict::Bad
                    } else {
                        Verdict::Good
                    }
                });
                assert_eq!((good, bad), (first_bad - 1, first_bad), "n={n}");
                assert!(skipped.is_empty());
                // log2 steps, not a linear scan.
                assert!(tried <= (n as f64).log2().ceil() as usize, "n={n}: {tried}");
            }
        }
    }

    #[test]
    fn skipped_candidates_are_stepped_around_and_named() {
        // 0 good .. 9 bad; 5 is the first bad; 4 and 5 cannot be installed.
        let (good, bad, skipped) = Search::new(10).run(|i| match i {
            4 | 5 => Verdict::Skip,
            i if i >= 5 => Verdict::Bad,
            _ => Verdict::Good,
        });
        assert_eq!((good, bad), (3, 6));
        assert_eq!(skipped, [4, 5]);
    }

    #[test]
    fn looks_back_exponentially_for_a_good_start() {
        assert_eq!(backwards(10), [9, 8, 6, 2, 0]);
        assert_eq!(backwards(1), [0]);
        assert_eq!(backwards(8), [7, 6, 4, 0]);
        assert!(backwards(0).is_empty());
    }
}
