//! `hopbudget audit` on spans written by the library itself: three HTTP services behind
//! `ServerBudgetLayer`, calling each other through reqwest with `BudgetMiddleware`, their hop
//! spans exported by `hopbudget::observe::otlp` and linked across the wire by the trace
//! context (feature `otel`). On one route pricing forgets the inbound deadline and calls tax
//! with a fresh 2 s budget of its own: the audit names tax, the forgetful route above it, and
//! says pricing forwarded a fresh budget; the clean route is not blamed.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hopbudget::http::reqwest::BudgetMiddleware;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{Profile, RequestBudget};
use hopbudget_cli::audit::{self, AuditOptions, FindingKind};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

fn client(p: &Profile) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(p.clone()))
        .build()
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_finds_the_forgetful_route_in_the_librarys_own_spans() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit-library.otlp.jsonl");
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let otlp = hopbudget::observe::otlp::install(&path, "audit-test").unwrap();
    let profile = |name: &str| Profile::default().with_service(name);

    let tax = serve(
        Router::new()
            .route("/tax", get(|| async { "ok" }))
            .layer(ServerBudgetLayer::new(profile("tax"))),
    )
    .await;
    let http = client(&profile("pricing"));
    let (h1, h2, t1, t2) = (http.clone(), http, tax.clone(), tax);
    let pricing = serve(
        Router::new()
            .route(
                "/price",
                get(move || {
                    let (http, tax) = (h1.clone(), t1.clone());
                    async move {
                        http.get(format!("{tax}/tax"))
                            .send()
                            .await
                            .unwrap()
                            .text()
                            .await
                            .unwrap()
                    }
                }),
            )
            .route(
                "/price-forgetful",
                get(move || {
                    let (http, tax) = (h2.clone(), t2.clone());
                    // S13: a fresh budget of this service's own instead of what is left.
                    let fresh =
                        RequestBudget::local(Duration::from_secs(2), Profile::default().policy());
                    async move {
                        http.get(format!("{tax}/tax"))
                            .with_extension(fresh)
                            .send()
                            .await
                            .unwrap()
                            .text()
                            .await
                            .unwrap()
                    }
                }),
            )
            .layer(ServerBudgetLayer::new(profile("pricing"))),
    )
    .await;

    let edge = client(&profile("edge"));
    for route in ["price", "price-forgetful"] {
        for _ in 0..5 {
            let answer =
                RequestBudget::local(Duration::from_millis(500), Profile::default().policy())
                    .scope(edge.get(format!("{pricing}/{route}")).send())
                    .await
                    .unwrap();
            assert_eq!(answer.status(), 200);
        }
    }
    otlp.shutdown().unwrap();

    let report = audit::run(&[path], &AuditOptions::default());
    let text = audit::render::table(&report);
    assert_eq!(report.problems_total, 0, "{text}");
    // Ten requests, two hops each, one trace each: the trace context crossed the wire.
    assert_eq!(report.traces.hop_spans, 20, "{text}");
    assert_eq!(report.traces.complete, 10, "{text}");
    let breaks: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::ChainBreak)
        .collect();
    assert_eq!(breaks.len(), 1, "{text}");
    let b = breaks[0];
    assert!(b.hop.starts_with("tax"), "{text}");
    assert_eq!((b.count, b.of), (5, 10), "{text}");
    assert_eq!(b.related.len(), 1, "{text}");
    assert!(b.related[0].contains("/price-forgetful"), "{text}");
    assert!(b.detail.contains("forwarded a fresh budget"), "{text}");
    assert_eq!(report.exit_status(), 1);

    // The rollout map from hop attributes alone: every request reached pricing and tax with
    // a deadline (`deadline.source` names a carrier), and pricing's calls carried one (the
    // forgetful route's was a fresh budget, but a deadline all the same: the reset above).
    let rollout: Vec<(&str, u64, u64, u64, u64, audit::Forwards)> = report
        .rollout
        .iter()
        .map(|r| {
            (
                r.service.as_str(),
                r.inbound,
                r.inbound_with_deadline,
                r.calls_out,
                r.calls_out_with_deadline,
                r.forwards,
            )
        })
        .collect();
    assert_eq!(
        rollout,
        [
            ("pricing", 10, 10, 10, 10, audit::Forwards::All),
            ("tax", 10, 10, 0, 0, audit::Forwards::NoCalls)
        ],
        "{text}"
    );
    assert!(report.rollout.iter().all(|r| r.refused == 0), "{text}");
}
