//! Rule C14: every hop's span carries the `deadline.*` fields of the table, as
//! `tracing` fields and, through tracing-opentelemetry, as OpenTelemetry span attributes
//! under the same names.
//!
//! One file on purpose, over 500 lines: the tests of one rule, C14, sharing the span capture
//! defined here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopbudget::codec::Carrier;
use hopbudget::observe::{Hop, HopLabels, Protocol};
use hopbudget::{Deadline, HopPolicy, Outcome, RequestBudget, Source};
use tracing::Instrument;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

type Fields = BTreeMap<String, String>;
/// (span, its parent) pairs, in creation order.
type Parents = Arc<Mutex<Vec<(Id, Option<Id>)>>>;

/// Records every span's fields, as given at creation and recorded later, by span name.
#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<(Id, String, Fields)>>>,
    /// Every event: its target, and its fields with the message under `message`.
    events: Arc<Mutex<Vec<(String, Fields)>>>,
    /// Each span's parent, by span id.
    parents: Parents,
}

struct Collect<'a>(&'a mut Fields);

impl Visit for Collect<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.to_string());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S>
    for Capture
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = if attrs.is_contextual() {
            ctx.current_span().id().cloned()
        } else {
            attrs.parent().cloned()
        };
        self.parents.lock().unwrap().push((id.clone(), parent));
        let mut fields = Fields::new();
        attrs.record(&mut Collect(&mut fields));
        self.spans
            .lock()
            .unwrap()
            .push((id.clone(), attrs.metadata().name().into(), fields));
    }
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut Collect(&mut fields));
        self.events
            .lock()
            .unwrap()
            .push((event.metadata().target().into(), fields));
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        let (_, _, fields) = spans.iter_mut().find(|(i, _, _)| i == id).unwrap();
        values.record(&mut Collect(fields));
    }
}

impl Capture {
    /// The parent of the first span named `name` is the first span named `parent`.
    fn is_child_of(&self, name: &str, parent: &str) -> bool {
        let spans = self.spans.lock().unwrap();
        let id_of = |n: &str| {
            spans
                .iter()
                .find(|(_, sn, _)| sn == n)
                .map(|(i, _, _)| i.clone())
        };
        let (Some(child), Some(parent)) = (id_of(name), id_of(parent)) else {
            return false;
        };
        let parents = self.parents.lock().unwrap();
        parents
            .iter()
            .any(|(i, p)| *i == child && p.as_ref() == Some(&parent))
    }

    fn hop_fields(&self) -> Vec<Fields> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, name, _)| name == "hop")
            .map(|(_, _, f)| f.clone())
            .collect()
    }
}

fn with_capture(f: impl FnOnce()) -> Vec<Fields> {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, f);
    capture.hop_fields()
}

fn labels() -> HopLabels {
    HopLabels::new("tax", "/tax/{id}", Protocol::Http)
}

#[tokio::test(start_paused = true)]
async fn start_fields_then_outcome_on_finish() {
    let hops = with_capture(|| {
        let budget = RequestBudget::from_carrier(
            Carrier::RelativeMs,
            Duration::from_millis(120),
            HopPolicy::DEFAULT,
        );
        let hop = Hop::start(&labels(), &budget);
        hop.finish(Outcome::Completed);
    });
    assert_eq!(hops.len(), 1);
    let f = &hops[0];
    assert_eq!(f["deadline.remaining_ms"], "120");
    assert_eq!(f["deadline.source"], "relative-ms");
    // hop margin 5 ms + transit allowance 1 ms
    assert_eq!(f["deadline.margin_ms"], "6");
    assert_eq!(f["deadline.outcome"], "completed");
    assert!(!f.contains_key("deadline.required_ms"));
    assert!(!f.contains_key("deadline.overrun_ms"));
    assert_eq!(f["otel.name"], "/tax/{id}");
    assert_eq!(f["otel.kind"], "server");
    assert_eq!(f["service.name"], "tax");
    assert_eq!(f["hop.protocol"], "http");
}

#[tokio::test(start_paused = true)]
async fn refused_hop_records_required_ms() {
    let hops = with_capture(|| {
        let budget = RequestBudget::local(Duration::from_millis(8), HopPolicy::DEFAULT);
        Hop::start(&labels(), &budget).refuse(Duration::from_millis(40));
    });
    let f = &hops[0];
    assert_eq!(f["deadline.outcome"], "refused");
    assert_eq!(f["deadline.required_ms"], "40");
    assert_eq!(f["deadline.source"], "local");
}

#[tokio::test(start_paused = true)]
async fn late_work_records_overrun_ms_and_fallback_source() {
    let hops = with_capture(|| {
        let budget = RequestBudget::new(
            Deadline::after(Duration::from_millis(1000)),
            Source::Fallback,
            HopPolicy::DEFAULT,
        );
        let hop = Hop::start(&labels(), &budget);
        hop.late_work(Duration::from_millis(250));
        hop.finish(Outcome::Expired);
    });
    let f = &hops[0];
    assert_eq!(f["deadline.source"], "fallback");
    assert_eq!(f["deadline.remaining_ms"], "1000");
    assert_eq!(f["deadline.outcome"], "expired");
    assert_eq!(f["deadline.overrun_ms"], "250");
}

#[tokio::test(start_paused = true)]
async fn dropped_hop_is_cancelled_and_queue_hop_is_a_consumer() {
    let hops = with_capture(|| {
        let budget = RequestBudget::local(Duration::from_millis(300), HopPolicy::DEFAULT);
        let labels = HopLabels::new("billing", "invoices", Protocol::Queue);
        drop(Hop::start(&labels, &budget));
    });
    let f = &hops[0];
    assert_eq!(f["deadline.outcome"], "cancelled");
    assert_eq!(f["otel.kind"], "consumer");
    assert_eq!(f["hop.protocol"], "queue");
}

#[tokio::test(start_paused = true)]
async fn handler_spans_nest_inside_the_hop_span() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _g = tracing::subscriber::set_default(subscriber);
    let budget = RequestBudget::local(Duration::from_millis(300), HopPolicy::DEFAULT);
    let hop = Hop::start(&labels(), &budget);
    async {
        let _child = tracing::info_span!("handler").entered();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    .instrument(hop.span().clone())
    .await;
    hop.finish(Outcome::Completed);
    assert!(capture.is_child_of("handler", "hop"));
}

/// A handler's own spans are children of the hop span the server layer opened for it, so a
/// trace shows the handler's work under the hop that carries the `deadline.*` fields.
#[cfg(all(feature = "http", feature = "grpc"))]
mod through_the_layers {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::Empty;
    use tower::{Layer as _, ServiceExt};

    use super::*;

    async fn handler(
        _req: http::Request<Empty<Bytes>>,
    ) -> Result<http::Response<Empty<Bytes>>, Infallible> {
        let span = tracing::info_span!("handler");
        async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok(http::Response::new(Empty::new()))
        }
        .instrument(span)
        .await
    }

    fn request(path: &str, header: (&str, &str)) -> http::Request<Empty<Bytes>> {
        http::Request::post(path)
            .header(header.0, header.1)
            .body(Empty::new())
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn http_server_layer() {
        let capture = Capture::default();
        let _g =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
        let svc = hopbudget::http::server::ServerBudgetLayer::new(hopbudget::Profile::default())
            .layer(tower::service_fn(handler));
        let res = svc
            .oneshot(request("/quote", ("x-request-timeout-ms", "300")))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        assert!(capture.is_child_of("handler", "hop"));
        // The answer's status beside the outcome (issue #33): `completed` is the deadline's
        // word, the status says what the answer was.
        let hop = &capture.hop_fields()[0];
        assert_eq!(hop["http.response.status_code"], "200", "{hop:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn grpc_server_layer() {
        let capture = Capture::default();
        let _g =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
        let svc = hopbudget::grpc::server::GrpcServerLayer::new(hopbudget::Profile::default())
            .layer(tower::service_fn(handler));
        let res = svc
            .oneshot(request("/tax.Tax/Quote", ("grpc-timeout", "300m")))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        assert!(capture.is_child_of("handler", "hop"));
    }
}

mod otel {
    //! The same fields through tracing-opentelemetry, collected by a real SDK tracer provider.

    use super::*;
    use opentelemetry::trace::{SpanKind, TracerProvider as _};
    use opentelemetry::{Key, Value};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

    #[derive(Clone, Debug, Default)]
    struct Collected(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Collected {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key == Key::new(key.to_owned()))
            .map(|kv| &kv.value)
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_fields_are_span_attributes() {
        let collected = Collected::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(collected.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("hopbudget"));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let budget = RequestBudget::from_carrier(
                Carrier::GrpcTimeout,
                Duration::from_millis(90),
                HopPolicy::DEFAULT,
            );
            Hop::start(
                &HopLabels::new("tax", "/tax.Tax/Quote", Protocol::Grpc),
                &budget,
            )
            .refuse(Duration::from_millis(200));
            let budget = RequestBudget::local(Duration::from_millis(500), HopPolicy::DEFAULT);
            let hop = Hop::start(&labels(), &budget);
            hop.late_work(Duration::from_millis(75));
            hop.finish(Outcome::Expired);
        });
        provider.force_flush().unwrap();
        let spans = collected.0.lock().unwrap();
        assert_eq!(spans.len(), 2);

        let refused = &spans[0];
        assert_eq!(refused.name, "/tax.Tax/Quote");
        assert_eq!(refused.span_kind, SpanKind::Server);
        assert_eq!(
            attr(refused, "deadline.remaining_ms"),
            Some(&Value::I64(90))
        );
        assert_eq!(
            attr(refused, "deadline.source"),
            Some(&Value::from("grpc-timeout"))
        );
        assert_eq!(attr(refused, "deadline.margin_ms"), Some(&Value::I64(6)));
        assert_eq!(
            attr(refused, "deadline.outcome"),
            Some(&Value::from("refused"))
        );
        assert_eq!(
            attr(refused, "deadline.required_ms"),
            Some(&Value::I64(200))
        );
        assert_eq!(attr(refused, "deadline.overrun_ms"), None);

        let late = &spans[1];
        assert_eq!(late.name, "/tax/{id}");
        assert_eq!(attr(late, "deadline.remaining_ms"), Some(&Value::I64(500)));
        assert_eq!(attr(late, "deadline.source"), Some(&Value::from("local")));
        assert_eq!(
            attr(late, "deadline.outcome"),
            Some(&Value::from("expired"))
        );
        assert_eq!(attr(late, "deadline.overrun_ms"), Some(&Value::I64(75)));
        assert_eq!(attr(late, "deadline.required_ms"), None);
    }
}

/// Issue #33: with `log: {hops: true}` the server layer writes one line per hop end on the
/// `hopbudget::hop` target (service, route, outcome, budget at arrival and its source, time
/// used), and refusals and missing deadlines are written at INFO on `hopbudget::notice`,
/// rate-limited so a burst of refusals writes a few lines, not one each. Through a real axum
/// server and reqwest over loopback.
#[cfg(all(feature = "axum", feature = "reqwest"))]
#[tokio::test]
async fn the_layer_logs_one_line_per_hop_and_rate_limited_notices() {
    use axum::Router;
    use axum::routing::get;
    use hopbudget::http::server::ServerBudgetLayer;

    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let profile = hopbudget::Profile::from_yaml(
        "service: tax\nlog: {hops: true, notices_per_s: 2}\nroutes: [{path: /short, min_budget_ms: 200}]",
        "test.yaml",
    )
    .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/short", get(|| async { "never" }))
        .layer(ServerBudgetLayer::new(profile));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let get = |path: &str, header: Option<&str>| {
        let mut req = client.get(format!("{url}{path}"));
        if let Some(h) = header {
            req = req.header("x-request-timeout-ms", h);
        }
        async move { req.send().await.unwrap().status().as_u16() }
    };
    // The first request names its trace, as an OpenTelemetry-instrumented caller does.
    let traced = client
        .get(format!("{url}/"))
        .header("x-request-timeout-ms", "300")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(traced.status(), 200);
    assert_eq!(get("/", None).await, 200);
    for _ in 0..20 {
        assert_eq!(get("/short", Some("50")).await, 503);
    }

    let events = capture.events.lock().unwrap().clone();
    let on = |target: &str| -> Vec<Fields> {
        events
            .iter()
            .filter(|(t, _)| t == target)
            .map(|(_, f)| f.clone())
            .collect()
    };
    let hops = on("hopbudget::hop");
    assert_eq!(hops.len(), 22, "one line per hop: {hops:?}");
    let first = &hops[0];
    assert_eq!(first["service"], "tax");
    assert_eq!(first["route"], "/");
    assert_eq!(first["outcome"], "completed");
    assert_eq!(first["source"], "relative-ms");
    let budget: u64 = first["budget_ms"].parse().unwrap();
    assert!((295..=300).contains(&budget), "{first:?}");
    assert!(first.contains_key("used_ms"), "{first:?}");
    // The answer's status beside the outcome: `completed` is the deadline's word only.
    assert_eq!(first["http_status"], "200", "{first:?}");
    // The caller's trace, so the line can be found from the trace and the trace from it.
    assert_eq!(
        first["trace_id"], "0af7651916cd43dd8448eb211c80319c",
        "{first:?}"
    );
    assert!(
        !hops[1].contains_key("trace_id"),
        "no traceparent, no trace id"
    );
    assert_eq!(hops[1]["source"], "fallback");
    assert_eq!(hops[2]["outcome"], "refused");
    assert_eq!(hops[2]["required_ms"], "200");

    let notices = on("hopbudget::notice");
    let missing = notices
        .iter()
        .filter(|f| f["message"].starts_with("deadline received: none"))
        .count();
    let refused: Vec<_> = notices
        .iter()
        .filter(|f| f["message"].starts_with("refused before work"))
        .collect();
    assert_eq!(missing, 1, "{notices:?}");
    assert!(
        (1..=4).contains(&refused.len()),
        "20 refusals within a second or two write at most two lines a second: {refused:?}"
    );
    assert!(refused[0]["remaining_ms"].parse::<u64>().unwrap() <= 50);
    assert_eq!(refused[0]["required_ms"], "200");
}

/// Issue #33 item 6: a user's test reads hop outcomes with `hopbudget_testkit::hops::HopCapture`
/// (no global recorder, no `/metrics` parsing) and waits for a hop to end: a real axum app
/// behind `ServerBudgetLayer`, called by reqwest over loopback, with one answer, one refusal
/// and one client that gives up.
#[cfg(all(feature = "axum", feature = "reqwest"))]
#[tokio::test]
async fn a_users_test_captures_hop_outcomes_and_waits_for_them() {
    use axum::Router;
    use axum::routing::get;
    use hopbudget::http::server::ServerBudgetLayer;
    use hopbudget_testkit::hops::HopCapture;

    let hops = HopCapture::new();
    let _guard = hops.install();
    let profile = hopbudget::Profile::from_yaml(
        "service: orders\nroutes: [{path: /orders, min_budget_ms: 100}]",
        "test.yaml",
    )
    .unwrap();
    let app = Router::new()
        .route("/orders", get(|| async { "ok" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                "late"
            }),
        )
        .layer(ServerBudgetLayer::new(profile));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let call = |path: &str, budget: &str| {
        client
            .get(format!("{url}{path}"))
            .header("x-request-timeout-ms", budget)
    };
    assert_eq!(call("/orders", "500").send().await.unwrap().status(), 200);
    assert_eq!(call("/orders", "50").send().await.unwrap().status(), 503);
    let gave_up = call("/slow", "5000")
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(gave_up.is_err(), "the client gave up");

    let wait = |route: &'static str, outcome: &'static str| {
        tokio::time::timeout(
            Duration::from_secs(5),
            hops.wait_for(move |h| h.route == route && h.outcome == outcome),
        )
    };
    let refused = wait("/orders", "refused").await.expect("a refused hop");
    assert_eq!(
        (refused.required_ms, refused.service.as_str()),
        (Some(100), "orders")
    );
    let cancelled = wait("/slow", "cancelled").await.expect("a cancelled hop");
    assert_eq!(cancelled.source, "relative-ms");
    assert!(cancelled.remaining_ms.is_some_and(|ms| ms > 4_900));
    assert_eq!(hops.outcomes("/orders"), ["completed", "refused"]);
}
