//! Bounded series: a running summary, and a history of at most [`MAX_BUCKETS`] buckets whose
//! width doubles (pairs merged) whenever it fills, so a run of any length keeps its shape in
//! constant memory.

use gradsleuth_model::capture::{SeriesSummary, WatchBucket};

/// Buckets kept per layer, whatever the run length.
pub const MAX_BUCKETS: usize = 256;

/// Adds one observation (`None`: no gradient) to a summary.
pub fn observe(s: &mut SeriesSummary, v: Option<f64>) {
    s.count += 1;
    let Some(v) = v else {
        s.none += 1;
        return;
    };
    s.last = Some(v);
    if !v.is_finite() {
        s.nonfinite += 1;
        return;
    }
    if v == 0.0 {
        s.zero += 1;
    }
    let finite = s.count - s.none - s.nonfinite;
    s.min = Some(s.min.map_or(v, |m| m.min(v)));
    s.max = Some(s.max.map_or(v, |m| m.max(v)));
    let mean = s.mean.unwrap_or(0.0);
    s.mean = Some(mean + (v - mean) / finite as f64);
}

/// One layer's history.
#[derive(Debug, Clone)]
pub struct History {
    pub stride: u64,
    pub buckets: Vec<WatchBucket>,
    /// Per bucket: (sum of finite norms, finite count, sum of ratios, ratio count).
    sums: Vec<(f64, u64, f64, u64)>,
}

impl Default for History {
    fn default() -> Self {
        History {
            stride: 1,
            buckets: Vec::new(),
            sums: Vec::new(),
        }
    }
}

fn merge(a: &mut WatchBucket, b: &WatchBucket) {
    a.steps += b.steps;
    a.max = max_opt(a.max, b.max);
    a.min = match (a.min, b.min) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    a.none += b.none;
    a.zero += b.zero;
    a.nonfinite += b.nonfinite;
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

impl History {
    fn bucket_for(&mut self, step: u64) -> usize {
        let start = |i: usize, stride: u64| 1 + i as u64 * stride;
        loop {
            let idx = ((step.saturating_sub(1)) / self.stride) as usize;
            if idx < MAX_BUCKETS {
                while self.buckets.len() <= idx {
                    let i = self.buckets.len();
                    self.buckets.push(WatchBucket {
                        step: start(i, self.stride),
                        ..Default::default()
                    });
                    self.sums.push((0.0, 0, 0.0, 0));
                }
                return idx;
            }
            // Full: merge neighbours, double the width.
            let mut buckets = Vec::with_capacity(MAX_BUCKETS);
            let mut sums = Vec::with_capacity(MAX_BUCKETS);
            for (pair, spair) in self.buckets.chunks(2).zip(self.sums.chunks(2)) {
                let mut b = pair[0].clone();
                let mut s = spair[0];
                if let (Some(b2), Some(s2)) = (pair.get(1), spair.get(1)) {
                    merge(&mut b, b2);
                    s.0 += s2.0;
                    s.1 += s2.1;
                    s.2 += s2.2;
                    s.3 += s2.3;
                }
                buckets.push(b);
                sums.push(s);
            }
            self.stride *= 2;
            self.buckets = buckets;
            self.sums = sums;
        }
    }

    /// A layer norm at `step` (1-based).
    pub fn push(&mut self, step: u64, v: Option<f64>) {
        let i = self.bucket_for(step);
        let b = &mut self.buckets[i];
        b.steps += 1;
        match v {
            None => b.none += 1,
            Some(v) if !v.is_finite() => b.nonfinite += 1,
            Some(v) => {
                if v == 0.0 {
                    b.zero += 1;
                }
                b.max = max_opt(b.max, Some(v));
                b.min = Some(b.min.map_or(v, |m| m.min(v)));
                self.sums[i].0 += v;
                self.sums[i].1 += 1;
            }
        }
    }

    /// An update-to-weight ratio sampled at `step`.
    pub fn push_ratio(&mut self, step: u64, r: f64) {
        if !r.is_finite() {
            return;
        }
        let i = self.bucket_for(step);
        self.sums[i].2 += r;
        self.sums[i].3 += 1;
    }

    /// The buckets with their means filled in.
    pub fn buckets(&self) -> Vec<WatchBucket> {
        self.buckets
            .iter()
            .zip(&self.sums)
            .map(|(b, s)| {
                let mut b = b.clone();
                b.mean = (s.1 > 0).then(|| s.0 / s.1 as f64);
                b.update_ratio = (s.3 > 0).then(|| s.2 / s.3 as f64);
                b
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_and_means() {
        let mut s = SeriesSummary::default();
        for v in [Some(1.0), None, Some(3.0), Some(0.0), Some(f64::NAN)] {
            observe(&mut s, v);
        }
        assert_eq!((s.count, s.none, s.zero, s.nonfinite), (5, 1, 1, 1));
        assert_eq!((s.min, s.max), (Some(0.0), Some(3.0)));
        assert!((s.mean.unwrap() - 4.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn history_stays_bounded_and_keeps_totals() {
        let mut h = History::default();
        let n = 100_000u64;
        for step in 1..=n {
            h.push(step, Some(step as f64));
            if step % 10 == 0 {
                h.push_ratio(step, 1e-3);
            }
        }
        let b = h.buckets();
        assert!(
            b.len() <= MAX_BUCKETS && b.len() > MAX_BUCKETS / 2,
            "{}",
            b.len()
        );
        assert_eq!(b.iter().map(|x| x.steps).sum::<u64>(), n);
        assert_eq!(b[0].step, 1);
        assert_eq!(b.last().unwrap().max, Some(n as f64));
        // Means are exact averages of what fell in each bucket.
        let first = &b[0];
        let expect = (1..=first.steps).sum::<u64>() as f64 / first.steps as f64;
        assert!((first.mean.unwrap() - expect).abs() < 1e-9);
        assert!(b
            .iter()
            .all(|x| x.update_ratio.is_some_and(|r| (r - 1e-3).abs() < 1e-12)));
    }
}
