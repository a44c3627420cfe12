//! The best a single hedge delay can do on a callee, computed from attempt pairs: for each
//! call, the latency of its first attempt and of a second attempt sent at the same moment,
//! both measured at the client in the same run. Hedging after a delay `d` turns a call into
//! its first attempt when that answered by `d`, and otherwise into the sooner of the first
//! attempt and `d` plus the second; it costs one extra call for every first attempt slower
//! than `d`. The best delay is the one, among those whose extra calls stay within a rate, that
//! gives the lowest p99.9.
//!
//! The pairs are taken as they came, not as independent draws: when the machine stalls, both
//! attempts of a pair are slow together, and no hedge delay can help those calls. The second
//! attempt of a pair started with the first rather than `d` later, so it saw the load of the
//! call's start; that is the one approximation here.

use serde::{Deserialize, Serialize};

/// One call's two attempts, ms from the call's start to each answer (an attempt that did not
/// answer counts as the call's whole budget).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    /// The first attempt.
    pub first_ms: f64,
    /// The second attempt, sent at the same moment.
    pub second_ms: f64,
}

/// The best single hedge delay at a given rate of extra calls, and what it gives.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Best {
    /// The hedge delay, ms (`None`: at that rate no delay hedges any call, so the best is not
    /// to hedge).
    pub delay_ms: Option<f64>,
    /// The p99.9 of the calls hedged after that delay, ms.
    pub p999_ms: f64,
    /// Extra calls that delay sends, as a share of calls.
    pub extra: f64,
}

/// The q-quantile of `values` (sorted in place): the smallest value with at least a share `q`
/// of them at or below it, as an HDR histogram reads a quantile. `None` when there are none.
pub fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = (q * values.len() as f64).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}

/// The lowest p99.9 any single hedge delay gives on `pairs` while sending at most `max_extra`
/// extra calls (a share of calls, e.g. 0.05); `None` when there are no pairs.
///
/// A later delay never answers a call sooner (the sooner of its first attempt and `d` plus
/// its second only grows with `d`), so the best delay is the earliest one within the rate:
/// the first attempts' latency with at most that many calls slower.
pub fn best_delay(pairs: &[Pair], max_extra: f64) -> Option<Best> {
    let n = pairs.len();
    let mut firsts: Vec<f64> = pairs.iter().map(|p| p.first_ms).collect();
    let unhedged = quantile(&mut firsts, 0.999)?;
    let allowed = (max_extra.max(0.0) * n as f64).floor() as usize;
    // `firsts` is sorted: at most `allowed` calls are slower than this one.
    let d = firsts[n.saturating_sub(allowed + 1)];
    let mut hedged = 0usize;
    let mut outcome: Vec<f64> = pairs
        .iter()
        .map(|p| {
            if p.first_ms > d {
                hedged += 1;
                p.first_ms.min(d + p.second_ms)
            } else {
                p.first_ms
            }
        })
        .collect();
    if hedged == 0 {
        return Some(Best {
            delay_ms: None,
            p999_ms: unhedged,
            extra: 0.0,
        });
    }
    Some(Best {
        delay_ms: Some(d),
        p999_ms: quantile(&mut outcome, 0.999).unwrap_or(unhedged),
        extra: hedged as f64 / n as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(spec: &[(usize, f64, f64)]) -> Vec<Pair> {
        spec.iter()
            .flat_map(|&(count, first_ms, second_ms)| {
                std::iter::repeat_n(
                    Pair {
                        first_ms,
                        second_ms,
                    },
                    count,
                )
            })
            .collect()
    }

    #[test]
    fn the_quantile_is_the_smallest_value_with_that_share_at_or_below_it() {
        let mut v: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        assert_eq!(quantile(&mut v, 0.999), Some(999.0));
        assert_eq!(quantile(&mut v, 0.5), Some(500.0));
        assert_eq!(quantile(&mut v, 1.0), Some(1000.0));
        assert_eq!(quantile(&mut v, 0.0), Some(1.0));
        assert_eq!(quantile(&mut [], 0.5), None);
    }

    #[test]
    fn the_best_delay_hedges_just_the_slow_calls_at_their_second_attempts_latency() {
        // 2% of first attempts take 100 ms, the rest 10 ms; every second attempt 10 ms.
        let p = pairs(&[(980, 10.0, 10.0), (20, 100.0, 10.0)]);
        let best = best_delay(&p, 0.05).unwrap();
        assert_eq!(best.delay_ms, Some(10.0));
        assert_eq!(best.p999_ms, 20.0, "10 ms delay + 10 ms second attempt");
        assert_eq!(best.extra, 0.02);
    }

    #[test]
    fn a_rate_too_low_to_hedge_the_slow_calls_leaves_them_unhedged() {
        let p = pairs(&[(980, 10.0, 10.0), (20, 100.0, 10.0)]);
        // 1% of 1,000 calls is 10 hedges: fewer than the 20 slow calls.
        let best = best_delay(&p, 0.01).unwrap();
        assert_eq!(best.delay_ms, None);
        assert_eq!(best.p999_ms, 100.0);
        assert_eq!(best.extra, 0.0);
    }

    #[test]
    fn pairs_slow_together_are_not_saved_by_a_hedge() {
        // The same slow first attempts, but their second attempts are slow too (a stall of
        // the machine): the pairs say no hedge helps, where independent draws would say 20 ms.
        let p = pairs(&[(980, 10.0, 10.0), (20, 100.0, 95.0)]);
        let best = best_delay(&p, 0.05).unwrap();
        assert_eq!(best.p999_ms, 100.0);
    }

    #[test]
    fn the_best_delay_is_the_earliest_within_the_rate() {
        // 3% of first attempts take 30 ms and 1% take 100 ms. At 5% the delay is 10 ms and
        // the 100 ms calls answer at 10 + 5 ms; at 1% it must be 30 ms, and they answer at
        // 30 + 5 ms; the 30 ms calls, hedged or not, answer by 30 ms.
        let p = pairs(&[(960, 10.0, 10.0), (30, 30.0, 60.0), (10, 100.0, 5.0)]);
        let wide = best_delay(&p, 0.05).unwrap();
        assert_eq!(
            (wide.delay_ms, wide.p999_ms, wide.extra),
            (Some(10.0), 30.0, 0.04)
        );
        let narrow = best_delay(&p, 0.01).unwrap();
        assert_eq!(
            (narrow.delay_ms, narrow.p999_ms, narrow.extra),
            (Some(30.0), 35.0, 0.01)
        );
    }

    #[test]
    fn no_pairs_no_best() {
        assert_eq!(best_delay(&[], 0.05), None);
    }
}
