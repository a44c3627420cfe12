//! `hopbudget-demo demo --broker nats://…`: the order-confirmation e-mail (S11) goes over the real
//! NATS JetStream server at `NATS_URL` (default 127.0.0.1:4222) instead of the in-process
//! queue, and its outcomes are counted as they are in process.
//!
//! Like the library's NATS tests, when the server is not there the message says what to start:
//! a failure with `HOPBUDGET_REQUIRE_SERVICES=1` (CI), else the tests that need it are
//! skipped (they return, and pass).

use std::time::Duration;

use crate::support::serial::one_demo_at_a_time;
use async_nats::jetstream;
use hopbudget_demo::demo::{self, DemoOptions, Mode, Topology};

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".to_owned())
}

fn broker_url() -> String {
    let url = nats_url();
    if url.starts_with("nats://") {
        url
    } else {
        format!("nats://{url}")
    }
}

/// A missing server: with `HOPBUDGET_REQUIRE_SERVICES=1` (CI, `scripts/test-all`) the test
/// fails with `message`; without it the test is skipped: it says what to start, and returns.
/// Not `process::exit`: this binary holds the demo's other tests, which need no server.
fn missing_service(message: String) {
    if std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() == Ok("1") {
        panic!("{message}");
    }
    // Straight to stderr: the test harness would swallow `eprintln!` from a test thread.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {message} (HOPBUDGET_REQUIRE_SERVICES=1 makes this a failure)"
    );
}

/// The demo stream's last sequence number (0 before it exists): every message the demo
/// stores there, e-mails and dead-letter copies, advances it. `None` when NATS is not there
/// and the test is skipped.
fn stream_sequence() -> Option<u64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = nats_url();
        let client = match async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .connect(&url)
            .await
        {
            Ok(client) => client,
            Err(e) => {
                missing_service(format!(
                    "start a NATS server with JetStream (`nats-server -js`) or set NATS_URL to \
                     one: NATS is not reachable at {url} ({e})"
                ));
                return None;
            }
        };
        Some(
            match jetstream::new(client).get_stream("HOPBUDGET_DEMO").await {
                Ok(mut stream) => stream.info().await.unwrap().state.last_sequence,
                Err(_) => 0,
            },
        )
    })
}

fn short(topology: Topology, modes: Vec<Mode>, broker: Option<String>) -> DemoOptions {
    let mut opts = DemoOptions::new(topology);
    opts.modes = modes;
    opts.duration = Some(Duration::from_secs(3));
    opts.drain_limit = Duration::from_secs(3);
    opts.broker = broker;
    opts
}

#[test]
fn background_email_over_nats_is_counted_as_in_process() {
    let _demo = one_demo_at_a_time();
    let Some(before) = stream_sequence() else {
        return;
    };
    let modes = vec![Mode::Timeouts, Mode::Propagated];
    let topology = Topology::builtin().unwrap();
    let (over_nats, _) =
        demo::run(&short(topology.clone(), modes.clone(), Some(broker_url()))).unwrap();
    let after = stream_sequence().expect("NATS was there at the start");
    let (in_process, _) = demo::run(&short(topology, modes, None)).unwrap();
    let table = demo::report::table(&over_nats);
    println!(
        "over NATS:\n{table}\nin process:\n{}",
        demo::report::table(&in_process)
    );

    let mut stored = 0;
    for results in [&over_nats, &in_process] {
        for m in &results.modes {
            // Every e-mail handed over is accounted for, and with a 30 s deadline none
            // expires: all sent, some after the client had its answer (C12).
            let b = &m.background;
            assert_eq!(b.sent, b.scheduled, "{}: {table}", m.mode);
            assert_eq!(b.expired + b.dropped_expired, 0, "{}: {table}", m.mode);
            if b.sent > 0 {
                assert!(b.sent_after_answer > 0, "{}: {table}", m.mode);
            }
        }
    }
    for m in &over_nats.modes {
        stored += m.background.scheduled;
    }
    // The e-mails really went through the stream (other runs may share it: at least).
    assert!(
        after - before >= stored,
        "{stored} e-mails scheduled, the stream stored {}",
        after - before
    );
}

#[test]
fn a_backlog_over_nats_is_gated_before_any_work() {
    let _demo = one_demo_at_a_time();
    // One worker, slow e-mails, a deadline shorter than the wait in the backlog: the
    // propagated mode's stamped deadline lapses in the stream and hopbudget's gate drops
    // those messages (dead-lettered) before any work (S10).
    let mut topology = Topology::builtin().unwrap();
    let bg = topology
        .services
        .iter_mut()
        .find_map(|s| s.background.as_mut())
        .expect("the built-in topology has background work");
    bg.workers = 1;
    bg.deadline_ms = 150;
    bg.latency.p50_ms = 100.0;
    bg.latency.p99_ms = 120.0;
    let Some(before) = stream_sequence() else {
        return;
    };
    let (results, _) =
        demo::run(&short(topology, vec![Mode::Propagated], Some(broker_url()))).unwrap();
    let after = stream_sequence().expect("NATS was there at the start");
    let table = demo::report::table(&results);
    println!("{table}");
    let b = &results.mode(Mode::Propagated).unwrap().background;
    assert_eq!(
        b.sent + b.dropped_expired + b.expired,
        b.scheduled,
        "every e-mail accounted for: {b:?}"
    );
    assert!(
        b.scheduled > 4,
        "too few checkouts completed to build a backlog: {b:?}"
    );
    assert!(b.dropped_expired > 0, "nothing dropped before work: {b:?}");
    // Each e-mail once, and a dead-letter copy of each one turned away or stopped.
    assert!(
        after - before >= b.scheduled + b.dropped_expired + b.expired,
        "stream stored {} for {b:?}",
        after - before
    );
}

#[test]
fn a_broker_that_is_not_nats_is_refused_before_anything_runs() {
    let opts = short(
        Topology::builtin().unwrap(),
        vec![Mode::Propagated],
        Some("kafka://127.0.0.1:9092".into()),
    );
    let err = demo::run(&opts).unwrap_err();
    assert!(err.contains("--broker kafka://127.0.0.1:9092"), "{err}");
    assert!(err.contains("nats://HOST:PORT"), "{err}");
}
