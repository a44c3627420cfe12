//! Rule C14: hop spans exported to a file as OTLP JSON, one `ExportTraceServiceRequest` per
//! line, in the shape an OpenTelemetry Collector's file exporter writes. Each test's subscriber
//! is its thread's own, except `otlp::install`'s, the global one.
#![cfg(feature = "otlp")]

use std::path::PathBuf;
use std::time::Duration;

use hopbudget::codec::Carrier;
use hopbudget::observe::otlp::proto::{ExportTraceServiceRequest, Value as Value_};
use hopbudget::observe::otlp::{FileSpanExporter, OtlpFile};
use hopbudget::observe::{Hop, HopLabels, Protocol};
use hopbudget::{HopPolicy, Outcome, RequestBudget};
use serde_json::Value;
use tracing_subscriber::layer::SubscriberExt;

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hopbudget-{name}-{}.jsonl", std::process::id()))
}

fn lines(path: &PathBuf) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn attrs(span: &Value) -> Vec<(String, Value)> {
    span["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| (kv["key"].as_str().unwrap().to_owned(), kv["value"].clone()))
        .collect()
}

fn attr(span: &Value, key: &str) -> Option<Value> {
    attrs(span)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

fn drive_hops() {
    let labels = HopLabels::new("tax", "/tax/{id}", Protocol::Http);
    let budget = RequestBudget::from_carrier(
        Carrier::RelativeMs,
        Duration::from_millis(120),
        HopPolicy::DEFAULT,
    );
    let hop = Hop::start(&labels, &budget);
    {
        let _inner = hop.span().enter();
        tracing::info_span!("db.query").in_scope(|| {});
    }
    hop.finish(Outcome::Completed);

    let budget = RequestBudget::local(Duration::from_millis(8), HopPolicy::DEFAULT);
    Hop::start(&labels, &budget).refuse(Duration::from_millis(40));

    let budget = RequestBudget::local(Duration::from_millis(500), HopPolicy::DEFAULT);
    let hop = Hop::start(
        &HopLabels::new("tax", "/tax.Tax/Quote", Protocol::Grpc),
        &budget,
    );
    hop.late_work(Duration::from_millis(75));
    hop.finish(Outcome::Expired);
}

#[test]
fn spans_are_written_as_otlp_json_lines() {
    let path = temp_path("export");
    let otlp = OtlpFile::create(&path, "tax-service").unwrap();
    let subscriber = tracing_subscriber::registry().with(otlp.layer());
    tracing::subscriber::with_default(subscriber, drive_hops);
    otlp.shutdown().unwrap();

    let lines = lines(&path);
    assert!(!lines.is_empty(), "no line written");
    // Every line must also parse back into the protobuf message.
    for line in std::fs::read_to_string(&path).unwrap().lines() {
        let _: ExportTraceServiceRequest = serde_json::from_str(line).unwrap();
    }

    let mut spans = Vec::new();
    for line in &lines {
        let obj = line.as_object().unwrap();
        assert_eq!(obj.keys().collect::<Vec<_>>(), ["resourceSpans"]);
        for rs in line["resourceSpans"].as_array().unwrap() {
            let resource = &rs["resource"];
            let service = attrs(resource)
                .into_iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v);
            assert_eq!(
                service,
                Some(serde_json::json!({"stringValue": "tax-service"}))
            );
            for ss in rs["scopeSpans"].as_array().unwrap() {
                assert_eq!(ss["scope"]["name"], "hopbudget");
                spans.extend(ss["spans"].as_array().unwrap().iter().cloned());
            }
        }
    }
    assert_eq!(spans.len(), 4, "{spans:#?}");

    for span in &spans {
        assert!(is_hex(span["traceId"].as_str().unwrap(), 32), "{span}");
        assert!(is_hex(span["spanId"].as_str().unwrap(), 16), "{span}");
        let start: u64 = span["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
        let end: u64 = span["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
        assert!(start > 1_600_000_000_000_000_000 && end >= start);
        assert!(span.get("trace_id").is_none() && span.get("start_time_unix_nano").is_none());
    }

    let by_name =
        |name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["name"] == name).collect() };
    let child = by_name("db.query")[0];
    let tax = by_name("/tax/{id}");
    assert_eq!(tax.len(), 2);
    let (completed, refused) =
        if attr(tax[0], "deadline.outcome").unwrap()["stringValue"] == "completed" {
            (tax[0], tax[1])
        } else {
            (tax[1], tax[0])
        };

    // server span kind is 2 in the OTLP enum
    assert_eq!(completed["kind"], 2);
    assert_eq!(child["parentSpanId"], completed["spanId"]);
    assert_eq!(child["traceId"], completed["traceId"]);

    let int = |v: &str| serde_json::json!({"intValue": v});
    let string = |v: &str| serde_json::json!({"stringValue": v});
    assert_eq!(
        attr(completed, "deadline.remaining_ms").map(|v| v.get("intValue").is_some()),
        Some(true)
    );
    let remaining: i64 = attr(completed, "deadline.remaining_ms").unwrap()["intValue"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((100..=120).contains(&remaining), "{remaining}");
    assert_eq!(
        attr(completed, "deadline.source"),
        Some(string("relative-ms"))
    );
    assert_eq!(attr(completed, "deadline.margin_ms"), Some(int("6")));
    assert_eq!(
        attr(completed, "deadline.outcome"),
        Some(string("completed"))
    );
    assert_eq!(attr(completed, "deadline.required_ms"), None);

    assert_eq!(attr(refused, "deadline.outcome"), Some(string("refused")));
    assert_eq!(attr(refused, "deadline.required_ms"), Some(int("40")));
    assert_eq!(attr(refused, "deadline.source"), Some(string("local")));

    let late = by_name("/tax.Tax/Quote")[0];
    assert_eq!(attr(late, "deadline.outcome"), Some(string("expired")));
    assert_eq!(attr(late, "deadline.overrun_ms"), Some(int("75")));

    if std::env::var_os("HOPBUDGET_KEEP_OTLP").is_none() {
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn append_keeps_earlier_lines() {
    let path = temp_path("append");
    for _ in 0..2 {
        let otlp = OtlpFile::with_exporter(FileSpanExporter::append(&path).unwrap(), "tax");
        let subscriber = tracing_subscriber::registry().with(otlp.layer());
        tracing::subscriber::with_default(subscriber, || {
            let budget = RequestBudget::local(Duration::from_millis(50), HopPolicy::DEFAULT);
            Hop::start(&HopLabels::new("tax", "/tax", Protocol::Http), &budget)
                .finish(Outcome::Completed);
        });
        otlp.shutdown().unwrap();
    }
    assert_eq!(lines(&path).len(), 2);
    // `create` replaces it.
    let otlp = OtlpFile::create(&path, "tax").unwrap();
    otlp.shutdown().unwrap();
    assert_eq!(lines(&path).len(), 0);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn read_parses_the_file_back_and_names_a_bad_line() {
    let path = temp_path("read");
    let otlp = OtlpFile::create(&path, "tax").unwrap();
    let subscriber = tracing_subscriber::registry().with(otlp.layer());
    tracing::subscriber::with_default(subscriber, drive_hops);
    otlp.shutdown().unwrap();

    let requests = hopbudget::observe::otlp::read(&path).unwrap();
    let spans: Vec<_> = requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .collect();
    assert_eq!(spans.len(), 4);
    let refused = spans
        .iter()
        .find(|s| {
            s.attributes.iter().any(|kv| {
                kv.key == "deadline.required_ms"
                    && kv.value.as_ref().and_then(|v| v.value.as_ref())
                        == Some(&Value_::IntValue(40))
            })
        })
        .expect("the refused hop");
    assert_eq!(refused.name, "/tax/{id}");
    assert_eq!(refused.trace_id.len(), 16);

    std::fs::write(&path, "{\"resourceSpans\":[]}\n\nnot json\n").unwrap();
    let err = hopbudget::observe::otlp::read(&path)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("{}:3:", path.display())), "{err}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn an_unopenable_file_is_named_in_the_error() {
    let path = std::env::temp_dir()
        .join("hopbudget-no-such-dir")
        .join("x")
        .join("t.jsonl");
    let err = OtlpFile::create(&path, "tax").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("t.jsonl") && msg.contains("hopbudget-no-such-dir"),
        "{msg}"
    );
}

/// In a process of its own (`support/own_process.rs`): the global subscriber it installs
/// would otherwise catch the spans of every other test of the binary on a thread with no
/// subscriber of its own.
#[test]
fn install_sets_the_global_subscriber_once() {
    if !crate::own_process::run_alone("otlp::install_sets_the_global_subscriber_once") {
        return;
    }
    let path = temp_path("install");
    let otlp = hopbudget::observe::otlp::install(&path, "global").unwrap();
    // Spawned thread: no scoped subscriber there, so the global one sees it.
    std::thread::spawn(|| {
        let budget = RequestBudget::local(Duration::from_millis(50), HopPolicy::DEFAULT);
        Hop::start(&HopLabels::new("global", "/g", Protocol::Http), &budget)
            .finish(Outcome::Completed);
    })
    .join()
    .unwrap();
    let again = hopbudget::observe::otlp::install(temp_path("install-2"), "global").unwrap_err();
    assert!(again.to_string().contains("already set"), "{again}");
    otlp.shutdown().unwrap();
    let lines = lines(&path);
    let names: Vec<_> = lines
        .iter()
        .flat_map(|l| {
            l["resourceSpans"][0]["scopeSpans"][0]["spans"]
                .as_array()
                .unwrap()
                .clone()
        })
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"/g".to_owned()), "{names:?}");
    std::fs::remove_file(&path).unwrap();
    let _ = std::fs::remove_file(temp_path("install-2"));
}
