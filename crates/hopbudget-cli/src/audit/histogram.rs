//! A bounded histogram of milliseconds: what every median, maximum and spike in the report is
//! read from, and what `--merge` adds up exactly.

use foldhash::HashMap;

/// Counts of values, exact to the millisecond below 10 s and to three significant digits
/// above, so its size is bounded whatever the values.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Histogram {
    #[serde(with = "crate::audit::serde_as::pairs")]
    counts: HashMap<u64, u64>,
    n: u64,
}

impl Histogram {
    fn bucket(v: u64) -> u64 {
        if v < 10_000 {
            return v;
        }
        let mut mag = 1;
        while v / mag >= 1_000 {
            mag *= 10;
        }
        v / mag * mag
    }

    pub(crate) fn add(&mut self, v: u64) {
        *self.counts.entry(Self::bucket(v)).or_default() += 1;
        self.n += 1;
    }

    /// Add another histogram's counts: exact, as the buckets are fixed (`audit --merge`).
    pub(crate) fn merge(&mut self, other: Histogram) {
        for (v, c) in other.counts {
            *self.counts.entry(v).or_default() += c;
        }
        self.n += other.n;
    }

    pub(crate) fn len(&self) -> u64 {
        self.n
    }

    pub(crate) fn sorted(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<_> = self.counts.iter().map(|(&k, &c)| (k, c)).collect();
        v.sort_unstable();
        v
    }

    /// The value at quantile `q` (0..=1).
    pub(crate) fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((self.n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (v, c) in self.sorted() {
            seen += c;
            if seen >= rank {
                return Some(v);
            }
        }
        None
    }
}

/// The densest narrow cluster of durations, if it stands out: at least `min` spans and 5%
/// of them within 1% (at least 2 ms) of one value, at least twice the median, and at least
/// three times as dense as the same width on either side.
pub(crate) fn spike(durations: &Histogram, min: u64) -> Option<(u64, u64)> {
    let n = durations.len();
    if n < min.max(1) * 2 {
        return None;
    }
    let median = durations.quantile(0.5)?;
    let sorted = durations.sorted();
    let count_in = |lo: u64, hi: u64| -> u64 {
        sorted
            .iter()
            .filter(|(v, _)| *v >= lo && *v <= hi)
            .map(|(_, c)| c)
            .sum()
    };
    let mut best: Option<(u64, u64)> = None;
    let mut hi_idx = 0;
    let mut in_window = 0u64;
    for lo_idx in 0..sorted.len() {
        let lo = sorted[lo_idx].0;
        let width = (lo / 100).max(2);
        while hi_idx < sorted.len() && sorted[hi_idx].0 <= lo + width {
            in_window += sorted[hi_idx].1;
            hi_idx += 1;
        }
        if best.is_none_or(|(_, c)| in_window > c) && lo >= 10 && lo >= median.saturating_mul(2) {
            best = Some((lo, in_window));
        }
        in_window -= sorted[lo_idx].1;
    }
    let (lo, count) = best?;
    let width = (lo / 100).max(2);
    let left = count_in(lo.saturating_sub(width + 1), lo.saturating_sub(1));
    let right = count_in(lo + width + 1, lo + 2 * width + 1);
    let stands_out = count >= min && count * 20 >= n && count >= 3 * left.max(right).max(1);
    stands_out.then_some((lo, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_and_buckets() {
        let mut h = Histogram::default();
        for v in [1, 2, 3, 4, 100] {
            h.add(v);
        }
        assert_eq!(h.quantile(0.5), Some(3));
        assert_eq!(h.quantile(1.0), Some(100));
        assert_eq!(Histogram::bucket(123_456), 123_000);
        assert_eq!(Histogram::bucket(9_999), 9_999);
    }
}
