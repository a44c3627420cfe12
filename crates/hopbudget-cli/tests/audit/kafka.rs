//! `hopbudget audit --kafka` (issue #36, item 7) on a real Kafka-protocol broker: two
//! instances of the `hopbudget` binary in one consumer group share a topic of two partitions
//! that holds the Python SDK's spans (`tests/fixtures/otel-python/`) as the OpenTelemetry
//! Collector's Kafka exporter writes them with `partition_traces_by_id: true` (one
//! `ExportTraceServiceRequest` per trace, keyed by its trace id; here alternately protobuf and
//! OTLP JSON, the exporter's two encodings). Each instance audits whole traces and commits
//! what it audited; their `--json` reports, merged with `--merge`, equal the audit of the
//! same spans from the file.
//!
//! The broker is `KAFKA_BROKERS`, else a `tansu` started on 127.0.0.1:19092 as the library's
//! Kafka tests do (`crates/hopbudget/tests/support/kafka.rs`). Without either the test says
//! so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI), where it fails.
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::command::hopbudget;
use crate::support::fixture::{fixture_lines, per_trace, to_text};
use crate::support::kafka_broker;
use crate::support::merge::comparable;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};
use prost::Message as _;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureRecord;
use serde_json::Value;

/// The broker, or why there is none (then the test is skipped, or fails in CI).
fn broker() -> Result<String, String> {
    let brokers = kafka_broker::brokers();
    let first = brokers.split(',').next().unwrap_or_default().to_owned();
    let listening = first.parse::<std::net::SocketAddr>().is_ok_and(|a| {
        std::net::TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok()
    });
    let tansu = Command::new("tansu")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !listening && (brokers != kafka_broker::DEFAULT_BROKERS || !tansu) {
        return Err(format!(
            "no Kafka broker at {brokers} and no `tansu` to start one (`cargo install tansu \
             --locked --features dynostore`, or set KAFKA_BROKERS)"
        ));
    }
    Ok(kafka_broker::ensure_broker())
}

// The OTLP JSON of the fixture as protobuf: what the exporter's `otlp_proto` encoding writes.

fn hex(s: &Value) -> Vec<u8> {
    let s = s.as_str().unwrap_or("");
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn nanos(v: &Value) -> u64 {
    v.as_str().map_or(0, |s| s.parse().unwrap())
}

fn any(v: &Value) -> AnyValue {
    let value = if let Some(s) = v.get("stringValue") {
        any_value::Value::StringValue(s.as_str().unwrap().to_owned())
    } else if let Some(i) = v.get("intValue") {
        any_value::Value::IntValue(i.as_str().unwrap().parse().unwrap())
    } else if let Some(b) = v.get("boolValue") {
        any_value::Value::BoolValue(b.as_bool().unwrap())
    } else if let Some(d) = v.get("doubleValue") {
        any_value::Value::DoubleValue(d.as_f64().unwrap())
    } else if let Some(a) = v.get("arrayValue") {
        any_value::Value::ArrayValue(ArrayValue {
            values: a["values"].as_array().unwrap().iter().map(any).collect(),
        })
    } else {
        panic!("an attribute value the fixture was not expected to hold: {v}")
    };
    AnyValue { value: Some(value) }
}

fn attributes(v: &Value) -> Vec<KeyValue> {
    v.as_array().map_or_else(Vec::new, |a| {
        a.iter()
            .map(|kv| KeyValue {
                key: kv["key"].as_str().unwrap().to_owned(),
                value: Some(any(&kv["value"])),
                ..Default::default()
            })
            .collect()
    })
}

fn to_proto(req: &Value) -> ExportTraceServiceRequest {
    let resource_spans = req["resourceSpans"].as_array().unwrap().iter().map(|rs| {
        let scope_spans = rs["scopeSpans"].as_array().unwrap().iter().map(|ss| {
            let spans = ss["spans"].as_array().unwrap().iter().map(|s| Span {
                trace_id: hex(&s["traceId"]),
                span_id: hex(&s["spanId"]),
                parent_span_id: hex(&s["parentSpanId"]),
                flags: s["flags"].as_u64().unwrap_or(0) as u32,
                name: s["name"].as_str().unwrap().to_owned(),
                kind: s["kind"].as_i64().unwrap_or(0) as i32,
                start_time_unix_nano: nanos(&s["startTimeUnixNano"]),
                end_time_unix_nano: nanos(&s["endTimeUnixNano"]),
                attributes: attributes(&s["attributes"]),
                events: s["events"].as_array().map_or_else(Vec::new, |e| {
                    e.iter()
                        .map(|e| span::Event {
                            time_unix_nano: nanos(&e["timeUnixNano"]),
                            name: e["name"].as_str().unwrap_or("").to_owned(),
                            attributes: attributes(&e["attributes"]),
                            ..Default::default()
                        })
                        .collect()
                }),
                status: Some(Status {
                    code: s["status"]["code"].as_i64().unwrap_or(0) as i32,
                    message: s["status"]["message"].as_str().unwrap_or("").to_owned(),
                }),
                ..Default::default()
            });
            ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: ss["scope"]["name"].as_str().unwrap_or("").to_owned(),
                    version: ss["scope"]["version"].as_str().unwrap_or("").to_owned(),
                    ..Default::default()
                }),
                spans: spans.collect(),
                schema_url: ss["schemaUrl"].as_str().unwrap_or("").to_owned(),
            }
        });
        ResourceSpans {
            resource: Some(Resource {
                attributes: attributes(&rs["resource"]["attributes"]),
                ..Default::default()
            }),
            scope_spans: scope_spans.collect(),
            schema_url: rs["schemaUrl"].as_str().unwrap_or("").to_owned(),
        }
    });
    ExportTraceServiceRequest {
        resource_spans: resource_spans.collect(),
    }
}

/// `hopbudget audit --kafka` running: the child and its standard error, line by line.
struct Instance {
    child: Child,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Instance {
    fn start(brokers: &str, topic: &str, group: &str, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hopbudget"))
            .args(["audit", "--json", "--kafka", brokers, "--topic", topic])
            .args(["--group", group])
            // The group has no offsets yet: read the partitions from their start.
            .args(["--kafka-config", "auto.offset.reset=earliest"])
            .args(["--kafka-config", "session.timeout.ms=6000"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, stderr) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self {
            child,
            stderr,
            seen: Vec::new(),
        }
    }

    /// The partitions of its latest assignment, once it has one.
    fn assigned(&mut self) -> Option<String> {
        self.seen.extend(self.stderr.try_iter());
        self.seen.iter().rev().find_map(|l| {
            l.split_once("partitions assigned: ")
                .map(|(_, p)| p.to_owned())
        })
    }

    /// Wait until standard error has a line containing `what`.
    fn wait_for(&mut self, what: &str) {
        let until = Instant::now() + Duration::from_secs(60);
        while !self.seen.iter().any(|l| l.contains(what)) {
            assert!(Instant::now() < until, "no {what:?} in {:?}", self.seen);
            if let Ok(l) = self.stderr.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(l);
            }
        }
    }

    /// SIGTERM; the exit status, its JSON reports (periodic ones first, the final one last)
    /// and its standard error.
    fn stop(mut self) -> (Option<i32>, Vec<Value>, Vec<String>) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let status = self.child.wait().unwrap();
        // The reader thread ends with the pipe.
        std::thread::sleep(Duration::from_millis(100));
        self.seen.extend(self.stderr.try_iter());
        assert!(
            !self.seen.iter().any(|l| l.contains("panicked")),
            "{:?}",
            self.seen
        );
        let reports = serde_json::Deserializer::from_str(&out)
            .into_iter::<Value>()
            .collect::<Result<Vec<_>, _>>()
            .unwrap_or_else(|e| panic!("{e}: {out:?}; stderr {:?}", self.seen));
        assert!(!reports.is_empty(), "no report; stderr {:?}", self.seen);
        (status.code(), reports, self.seen)
    }
}

async fn create_topic(brokers: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("creating the topic failed");
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t} failed: {e}"));
    }
}

/// Per partition, the group's committed offset and the end of the partition.
fn committed_and_ends(brokers: &str, group: &str, topic: &str, partitions: i32) -> Vec<(i64, i64)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = c.committed_offsets(tpl, Duration::from_secs(5)).ok();
    (0..partitions)
        .map(|p| {
            let at = committed
                .as_ref()
                .and_then(|l| l.find_partition(topic, p).and_then(|e| e.offset().to_raw()))
                .unwrap_or(-1);
            let (_, high) = c
                .fetch_watermarks(topic, p, Duration::from_secs(5))
                .unwrap();
            (at, high)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_in_one_group_share_the_traces_and_their_merge_equals_one_audit() {
    let brokers = match broker() {
        Ok(b) => b,
        Err(why) => {
            assert!(
                std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "HOPBUDGET_REQUIRE_SERVICES=1: {why}"
            );
            eprintln!("SKIPPED (HOPBUDGET_REQUIRE_SERVICES=1 makes this a failure): {why}");
            return;
        }
    };
    const PARTITIONS: i32 = 2;
    let topic = kafka_broker::unique("hb-audit-spans");
    let group = kafka_broker::unique("hb-audit");
    create_topic(&brokers, &topic, PARTITIONS).await;

    // Both instances join; wait until the group has dealt one partition to each.
    // `a` also reports every second.
    let mut a = Instance::start(&brokers, &topic, &group, &["--interval", "1"]);
    let until = Instant::now() + Duration::from_secs(60);
    while a.assigned().is_none_or(|p| p == "none") {
        assert!(Instant::now() < until, "a was never assigned: {:?}", a.seen);
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut b = Instance::start(&brokers, &topic, &group, &[]);
    loop {
        let (pa, pb) = (a.assigned(), b.assigned());
        if let (Some(pa), Some(pb)) = (&pa, &pb)
            && pa != "none"
            && pb != "none"
            && pa != pb
            && !pa.contains(", ")
        {
            break;
        }
        assert!(
            Instant::now() < until,
            "the group did not share the partitions: a {:?}, b {:?}",
            a.seen,
            b.seen
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // What the exporter with partition_traces_by_id writes: a request per trace, keyed by
    // its trace id. One record per batch: see `unbatched_producer` (tansu 0.6).
    let producer = kafka_broker::unbatched_producer(&brokers);
    let records = per_trace(&fixture_lines());
    let mut partitions_used = [0usize; PARTITIONS as usize];
    for (i, (trace, req)) in records.iter().enumerate() {
        let payload = if i % 2 == 0 {
            to_proto(req).encode_to_vec()
        } else {
            req.to_string().into_bytes()
        };
        let delivered = producer
            .send(
                FutureRecord::to(&topic).key(trace).payload(&payload),
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("producing failed: {e}"));
        partitions_used[delivered.partition as usize] += 1;
    }
    // A record that is no trace request: a problem in its instance's report, not a stall.
    producer
        .send(
            FutureRecord::to(&topic)
                .key("garbage")
                .payload(&b"\xff\x01 not OTLP"[..]),
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|(e, _)| panic!("producing failed: {e}"));
    assert!(
        partitions_used.iter().all(|&n| n > 0),
        "the keys did not spread over both partitions: {partitions_used:?}"
    );

    // Every record is committed once its spans are in an audit.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let offsets = committed_and_ends(&brokers, &group, &topic, PARTITIONS);
        if offsets.iter().all(|(at, end)| at == end) {
            break;
        }
        assert!(
            Instant::now() < until,
            "not all committed: {offsets:?} (committed, end) per partition"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    a.wait_for("hopbudget audit: report after");
    let (status_a, reports_a, err_a) = a.stop();
    let (status_b, reports_b, err_b) = b.stop();
    assert!(
        reports_a.len() >= 2,
        "a periodic report, then the final one"
    );
    assert_eq!(reports_b.len(), 1, "no --interval: the final report only");
    let (report_a, report_b) = (reports_a.last().unwrap(), &reports_b[0]);
    assert!(
        err_a.iter().any(|l| l.contains("stopped by SIGTERM")),
        "{err_a:?}"
    );
    for (report, err) in [(report_a, &err_a), (report_b, &err_b)] {
        assert!(report["input"]["spans"].as_u64() > Some(0), "{err:?}");
    }
    let problems = |r: &Value| r["problems_total"].as_u64().unwrap();
    assert_eq!(problems(report_a) + problems(report_b), 1);
    let total = |r: &Value| r["input"]["requests"].as_u64().unwrap();
    eprintln!(
        "{} records on partitions {partitions_used:?}; instance a audited {} ({} spans), b {} \
         ({} spans)",
        records.len(),
        total(report_a),
        report_a["input"]["spans"],
        total(report_b),
        report_b["input"]["spans"]
    );
    assert_eq!(
        total(report_a) + total(report_b),
        records.len() as u64 + 1,
        "every record audited once, by one instance"
    );

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&group);
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let file_a = write("a.json", report_a.to_string());
    let file_b = write("b.json", report_b.to_string());
    let spans = write("spans.jsonl", to_text(&fixture_lines()));
    let (merged_status, merged, err) = hopbudget(&["audit", "--merge", "--json", &file_a, &file_b]);
    let merged: Value = serde_json::from_str(&merged).unwrap_or_else(|e| panic!("{e}: {err}"));
    let (one_status, one, _) = hopbudget(&["audit", "--json", &spans]);
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(comparable(&merged), comparable(&one));
    assert_eq!(merged_status, one_status);
    // The bad record is named by topic, partition and offset, in the merge too.
    let problem = &merged["problems"][0];
    assert!(
        problem["file"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{topic}[")),
        "{problem}"
    );
    assert!(
        problem["reason"]
            .as_str()
            .unwrap()
            .contains("not an OTLP protobuf trace request"),
        "{problem}"
    );
    // The instances' exit statuses are their own shares' (a reset seen by either is 1).
    assert!(
        status_a == Some(1) || status_b == Some(1),
        "{status_a:?} {status_b:?}"
    );
}
