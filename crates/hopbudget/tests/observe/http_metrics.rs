//! Rule C14 end to end: real HTTP requests through `ServerBudgetLayer` on an axum server, and
//! hopbudget's metrics scraped from a real `/metrics` endpoint on another port.
//!
//! The recorder is the binary's one process-wide recorder (`metrics_support::recorder()`);
//! the service name `tax-http` is this test's alone in the binary.
#![cfg(all(feature = "axum", feature = "prometheus"))]

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{Profile, observe};

use crate::metrics_support::sample;

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_layer_hops_show_up_on_metrics() {
    let handle = crate::metrics_support::recorder().clone();
    observe::describe_metrics();
    let metrics_url =
        serve(Router::new().route("/metrics", get(move || async move { handle.render() }))).await;

    let profile = Profile::from_yaml(
        "service: tax-http\nroutes: [{path: /slow, min_budget_ms: 200}]",
        "test-profile",
    )
    .unwrap();
    let app = Router::new()
        .route("/items/{id}", get(|| async { "item" }))
        .route("/slow", get(|| async { "never" }))
        .route(
            "/late",
            get(|| async {
                // Blocks past its deadline without yielding: the answer comes late.
                std::thread::sleep(Duration::from_millis(150));
                "late"
            }),
        )
        // C17: a handler's own deadline answers are the hop's outcome.
        .route(
            "/answers/expired",
            get(|| async {
                (
                    axum::http::StatusCode::GATEWAY_TIMEOUT,
                    "downstream expired",
                )
            }),
        )
        .route(
            "/answers/refused",
            get(|| async {
                (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    [
                        ("x-deadline-required-ms", "200"),
                        ("x-deadline-remaining-ms", "50"),
                    ],
                    "needs 200 ms",
                )
            }),
        )
        .route(
            "/answers/cancelled",
            get(|| async { (axum::http::StatusCode::from_u16(499).unwrap(), "gone") }),
        )
        .layer(ServerBudgetLayer::new(profile));
    let url = serve(app).await;
    let http = reqwest::Client::new();
    let get = |path: &str, header: Option<&str>| {
        let mut req = http.get(format!("{url}{path}"));
        if let Some(h) = header {
            req = req.header("x-request-timeout-ms", h);
        }
        async move {
            // Read the whole answer: the hop ends when its body has gone out.
            let res = req.send().await.unwrap();
            let status = res.status().as_u16();
            res.bytes().await.unwrap();
            status
        }
    };

    assert_eq!(get("/items/7", Some("300")).await, 200);
    assert_eq!(get("/items/8", Some("30")).await, 200); // low budget
    assert_eq!(get("/items/9", None).await, 200); // no deadline: fallback
    assert_eq!(get("/items/1", Some("soon")).await, 400); // malformed
    assert_ne!(get("/slow", Some("120")).await, 200); // refused: needs 200 ms
    get("/late", Some("60")).await;
    assert_eq!(get("/answers/expired", Some("300")).await, 504);
    assert_eq!(get("/answers/refused", Some("300")).await, 503);
    assert_eq!(get("/answers/cancelled", Some("300")).await, 499);
    // C20, S15: paths no route matches share one label, whatever they are.
    for i in 0..50 {
        assert_eq!(get(&format!("/nope/{i}"), Some("300")).await, 404);
    }

    let text = http
        .get(format!("{metrics_url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    let items = r#"service="tax-http",route="/items/{id}""#;
    let outcome =
        |route: &str, o: &str| format!(r#"service="tax-http",route="{route}",outcome="{o}""#);
    assert_eq!(
        sample(
            &text,
            "hopbudget_hops_total",
            &outcome("/items/{id}", "completed")
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(sample(&text, "hopbudget_arrivals_total", items), Some(3.0));
    assert_eq!(
        sample(&text, "hopbudget_low_budget_arrivals_total", items),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hopbudget_deadline_missing_total", items),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hopbudget_remaining_at_arrival_ms_count", items),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            "hopbudget_remaining_at_arrival_ms_bucket",
            &format!("{items},le=\"30\"")
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "hopbudget_malformed_headers_total",
            r#"service="tax-http",route="/items/{id}",header="x-request-timeout-ms""#
        ),
        Some(1.0)
    );

    let slow = r#"service="tax-http",route="/slow""#;
    assert_eq!(
        sample(&text, "hopbudget_refused_before_work_total", slow),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "hopbudget_hops_total", &outcome("/slow", "refused")),
        Some(1.0)
    );

    let late = r#"service="tax-http",route="/late""#;
    assert_eq!(sample(&text, "hopbudget_late_work_total", late), Some(1.0));
    assert_eq!(
        sample(&text, "hopbudget_late_work_overrun_ms_count", late),
        Some(1.0)
    );
    assert!(sample(&text, "hopbudget_late_work_overrun_ms_sum", late).unwrap() > 0.0);

    for (route, o) in [
        ("/answers/expired", "expired"),
        ("/answers/refused", "refused"),
        ("/answers/cancelled", "cancelled"),
    ] {
        assert_eq!(
            sample(&text, "hopbudget_hops_total", &outcome(route, o)),
            Some(1.0),
            "{route}: {text}"
        );
        assert_eq!(
            sample(&text, "hopbudget_hops_total", &outcome(route, "completed")),
            None,
            "{route}"
        );
    }
    assert_eq!(
        sample(
            &text,
            "hopbudget_refused_before_work_total",
            r#"service="tax-http",route="/answers/refused""#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "hopbudget_arrivals_total",
            r#"service="tax-http",route="other""#
        ),
        Some(50.0),
        "{text}"
    );
    assert!(!text.contains("/nope/"), "no raw path becomes a label");
}
