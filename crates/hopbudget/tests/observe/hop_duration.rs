//! `hopbudget_hop_duration_ms` and `hopbudget_budget_used_ratio` (issue #50 item 1): a hop's
//! time from arrival to its end, in the narrow bucket around a default timeout when it ends
//! there, and the share of its budget it used. Time is paused, so the durations are exact.
#![cfg(feature = "prometheus")]

use std::time::Duration;

use hopbudget::codec::Carrier;
use hopbudget::observe::{self, Hop, HopLabels, Protocol};
use hopbudget::{HopPolicy, Outcome, RequestBudget};

fn line<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no {start} in:\n{text}"))
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hop_that_ends_at_a_default_lands_in_its_narrow_bucket() {
    let recorder = observe::prometheus::builder().unwrap().build_recorder();
    let handle = recorder.handle();
    let labels = HopLabels::new("stock", "/stock", Protocol::Http);
    let budget = |ms| {
        RequestBudget::from_carrier(
            Carrier::RelativeMs,
            Duration::from_millis(ms),
            HopPolicy::DEFAULT,
        )
    };

    // Told 4 s, worked 1 s and a few ms: the 1 s default decided, not the deadline.
    let hop = metrics::with_local_recorder(&recorder, || Hop::start(&labels, &budget(4000)));
    tokio::time::advance(Duration::from_millis(1003)).await;
    metrics::with_local_recorder(&recorder, || hop.finish(Outcome::Expired));
    // Told 400 ms, used 300 of them.
    let hop = metrics::with_local_recorder(&recorder, || Hop::start(&labels, &budget(400)));
    tokio::time::advance(Duration::from_millis(300)).await;
    metrics::with_local_recorder(&recorder, || hop.finish(Outcome::Completed));

    let text = handle.render();
    let bucket = |outcome: &str, le: &str| {
        let start = format!(
            "hopbudget_hop_duration_ms_bucket{{service=\"stock\",route=\"/stock\",outcome=\"{outcome}\",le=\"{le}\"}} "
        );
        line(&text, &start)[start.len()..].to_owned()
    };
    assert_eq!(bucket("expired", "950"), "0");
    assert_eq!(bucket("expired", "1050"), "1");
    assert_eq!(bucket("completed", "250"), "0");
    assert_eq!(bucket("completed", "500"), "1");
    let sum =
        "hopbudget_hop_duration_ms_sum{service=\"stock\",route=\"/stock\",outcome=\"expired\"} ";
    let sum: f64 = line(&text, sum)[sum.len()..].parse().unwrap();
    assert!((sum - 1003.0).abs() < 1e-6, "{sum}");
    // 1003 of 4000 ms, and 300 of 400: one under a half, one between 0.75 and 0.9.
    let used = |le: &str| {
        let start = format!(
            "hopbudget_budget_used_ratio_bucket{{service=\"stock\",route=\"/stock\",le=\"{le}\"}} "
        );
        line(&text, &start)[start.len()..].to_owned()
    };
    assert_eq!(used("0.25"), "0");
    assert_eq!(used("0.5"), "1");
    assert_eq!(used("0.75"), "2");
}
