//! Protocol shims keep one budget (C11): an HTTP handler calling a gRPC downstream, and a
//! gRPC handler calling an HTTP downstream. Every server is real (axum behind
//! `ServerBudgetLayer`, tonic behind `GrpcServerLayer`) and every client goes through its
//! layer (`GrpcClientLayer`, reqwest with `BudgetMiddleware`). The handlers' only code for the
//! budget is none at all: the call itself picks up the ambient budget, and a failure is handed
//! on with `?` through `DownstreamError`, keeping its deadline meaning (C4, C10).
#![cfg(all(feature = "grpc", feature = "axum", feature = "reqwest"))]

use std::sync::Arc;
use std::time::Duration;

use crate::grpc_support::*;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use hopbudget::http::reqwest::BudgetMiddleware;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{BudgetError, DownstreamError, Profile, RequestBudget};
use hopbudget_testkit::pb::CallReply;
use reqwest_middleware::ClientBuilder;

async fn serve_http(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// HTTP leaf: reports its budget as `remaining_us source`, after `?work_ms=N` of work.
async fn http_leaf(profile: Profile) -> String {
    async fn leaf(
        budget: RequestBudget,
        axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, u64>>,
    ) -> String {
        let seen = budget.remaining().as_micros();
        if let Some(ms) = q.get("work_ms") {
            tokio::time::sleep(Duration::from_millis(*ms)).await;
        }
        format!("{seen} {}", budget.source().as_str())
    }
    serve_http(
        Router::new()
            .route("/leaf", get(leaf))
            .layer(ServerBudgetLayer::new(profile.with_service("http-leaf"))),
    )
    .await
}

/// A gRPC hop whose `http-shim:URL` downstreams are called with reqwest + BudgetMiddleware.
async fn grpc_hop_with_http_downstream() -> Server {
    let profile = Profile::default().with_service("grpc-mid");
    let http = ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(profile.clone()))
        .build();
    let mut handler = HopHandler::new(profile);
    handler.http = Some(Arc::new(move |url: String| {
        let http = http.clone();
        Box::pin(async move {
            // The call is all there is: the middleware finds the ambient gRPC budget.
            // No error mapping either: a deadline outcome from below keeps its meaning.
            let res = http.get(&url).send().await.map_err(DownstreamError::from)?;
            // A downstream's own failure keeps its meaning across the shim (a 404 below is
            // NOT_FOUND here, and a 404 again above it).
            let res = res.error_for_status().map_err(DownstreamError::from)?;
            let text = res
                .text()
                .await
                .map_err(|e| tonic::Status::internal(e.to_string()))?;
            let (us, source) = text.split_once(' ').unwrap_or(("0", "?"));
            Ok(CallReply {
                remaining_us: vec![us.parse().unwrap_or(0)],
                source: vec![source.to_owned()],
                tag: String::new(),
                grpc_timeout: vec![String::new()],
            })
        })
    }));
    serve(handler).await
}

/// HTTP edge: calls the gRPC hop with the downstream list it is given in `?next=`.
async fn http_edge(grpc_url: String) -> String {
    async fn edge(
        State(grpc_url): State<String>,
        axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
    ) -> Result<String, DownstreamError> {
        let seen = RequestBudget::current().map_or(0, |b| b.remaining().as_micros());
        let next: Vec<&str> = q
            .get("next")
            .map(|s| s.split(',').collect())
            .unwrap_or_default();
        let work_ms = q.get("work_ms").and_then(|s| s.parse().ok()).unwrap_or(0);
        // The call is all there is: GrpcClientLayer finds the ambient HTTP budget.
        let reply = grpc_client(&Profile::default(), &grpc_url)
            .call(call(&next, work_ms))
            .await?
            .into_inner();
        let mut out = vec![seen.to_string()];
        out.extend(reply.remaining_us.iter().map(u64::to_string));
        out.extend(reply.source);
        Ok(out.join(" "))
    }
    serve_http(
        Router::new()
            .route("/edge", get(edge))
            .with_state(grpc_url)
            .layer(ServerBudgetLayer::new(
                Profile::default().with_service("http-edge"),
            )),
    )
    .await
}

fn client() -> reqwest_middleware::ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(Profile::default()))
        .build()
}

#[tokio::test]
async fn http_to_grpc_to_http_keeps_one_shrinking_budget() {
    let leaf = http_leaf(Profile::default()).await;
    let mid = grpc_hop_with_http_downstream().await;
    let edge = http_edge(mid.url()).await;

    let start = RequestBudget::local(Duration::from_millis(800), Profile::default().policy());
    let res = start
        .scope(
            client()
                .get(format!("{edge}/edge?next=http-shim:{leaf}/leaf"))
                .send(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    let fields: Vec<&str> = text.split(' ').collect();
    // edge, mid, leaf budgets in us, then mid's and leaf's sources.
    assert_eq!(fields.len(), 5, "{text}");
    let seen: Vec<u64> = fields[..3].iter().map(|s| s.parse().unwrap()).collect();
    assert_eq!(&fields[3..], ["grpc-timeout", "relative-ms"], "{text}");
    let mut previous = 800_000;
    for (hop, &us) in seen.iter().enumerate() {
        assert!(us > 0, "hop {hop} got a budget: {text}");
        assert!(
            us < previous,
            "hop {hop}: {us} us is not less than {previous} us: {text}"
        );
        assert!(
            previous - us >= 6_000,
            "hop {hop} kept margin + transit back: {text}"
        );
        previous = us;
    }
    assert_eq!(mid.stats.entered(), 1);
}

#[tokio::test]
async fn expiry_beyond_the_shims_is_expiry_at_every_hop() {
    // The HTTP leaf works 10 s and accepts at most 150 ms, so its own deadline runs out
    // first. Its 504 becomes DEADLINE_EXCEEDED at the gRPC hop, and 504 again at the edge.
    let short = Profile::from_yaml("max_ms: 150\nedge_total_ms: 150\n", "leaf.yaml").unwrap();
    let leaf = http_leaf(short).await;
    let mid = grpc_hop_with_http_downstream().await;
    let edge = http_edge(mid.url()).await;

    let start = RequestBudget::local(Duration::from_millis(300), Profile::default().policy());
    let err = start
        .scope(
            client()
                .get(format!(
                    "{edge}/edge?next=http-shim:{leaf}/leaf%3Fwork_ms%3D10000"
                ))
                .send(),
        )
        .await
        .expect_err("out of time");
    assert_eq!(
        BudgetError::find(&err),
        Some(&BudgetError::Expired),
        "{err:?}"
    );
    assert!(
        mid.stats
            .wait_for(Duration::from_secs(1), |s| !s
                .downstream_codes
                .lock()
                .unwrap()
                .is_empty())
            .await
    );
    assert_eq!(
        *mid.stats.downstream_codes.lock().unwrap(),
        [tonic::Code::DeadlineExceeded]
    );
}

#[tokio::test]
async fn grpc_to_http_from_a_plain_grpc_edge() {
    // gRPC in, HTTP out: a gRPC hop's handler calls an HTTP service with no budget code.
    let leaf = http_leaf(Profile::default()).await;
    let mid = grpc_hop_with_http_downstream().await;
    let reply = budget(500)
        .scope(
            grpc_client(&Profile::default(), &mid.url())
                .call(call(&[&format!("http-shim:{leaf}/leaf")], 0)),
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.source, ["grpc-timeout", "relative-ms"], "{reply:?}");
    assert!(reply.remaining_us[1] < reply.remaining_us[0], "{reply:?}");
    assert!(reply.remaining_us[0] < 500_000, "{reply:?}");
}

#[tokio::test]
async fn a_refusal_below_the_shim_reaches_the_http_client_as_a_refusal() {
    // The gRPC hop needs 10 s; the edge hands it what is left of 500 ms. Its refusal
    // (DEADLINE_EXCEEDED marked refused) crosses the HTTP edge by `?` alone and arrives as a
    // 503 refusal with the requirement the gRPC hop stated (C3, C10, C11).
    let strict = Profile::from_yaml(
        &format!(
            "routes: [{{path: {}, min_budget_ms: 10000}}]",
            hopbudget_testkit::HOP_CALL_PATH
        ),
        "strict.yaml",
    )
    .unwrap();
    let mid = serve_profile("strict", strict).await;
    let edge = http_edge(mid.url()).await;

    let start = RequestBudget::local(Duration::from_millis(500), Profile::default().policy());
    let err = start
        .scope(client().get(format!("{edge}/edge")).send())
        .await
        .expect_err("refused below");
    match BudgetError::find(&err) {
        Some(BudgetError::Refused(r)) => {
            assert_eq!(r.required(), Duration::from_secs(10), "{err:?}");
            assert!(r.remaining() < Duration::from_millis(500), "{err:?}");
        }
        other => panic!("expected a refusal, got {other:?} from {err:?}"),
    }
    assert_eq!(mid.stats.entered(), 0, "the refusing handler never ran");
}

#[tokio::test]
async fn an_expiry_the_callees_profile_spells_unavailable_is_expiry_across_the_shim() {
    // The gRPC hop's profile spells expiry UNAVAILABLE (validation allows it) and caps its
    // budget at 150 ms; its work takes 10 s. Its answer, UNAVAILABLE marked `expired`, is read
    // by the marker: 504 expired at the HTTP edge, not 502 (C4, C10, issue 32).
    let unavailable = Profile::from_yaml(
        "max_ms: 150\nedge_total_ms: 150\nstatus: {grpc: {expired: UNAVAILABLE}}\n",
        "unavailable.yaml",
    )
    .unwrap();
    let mid = serve_profile("unavailable", unavailable).await;
    let edge = http_edge(mid.url()).await;
    let start = RequestBudget::local(Duration::from_millis(800), Profile::default().policy());
    let err = start
        .scope(client().get(format!("{edge}/edge?work_ms=10000")).send())
        .await
        .expect_err("expired below the shim");
    assert_eq!(
        BudgetError::find(&err),
        Some(&BudgetError::Expired),
        "{err:?}"
    );
    // And a tonic caller reads the same status back as expiry.
    let status = budget(800)
        .scope(grpc_client(&Profile::default(), &mid.url()).call(call(&[], 10_000)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(
        BudgetError::from_grpc(&status),
        Some(BudgetError::Expired),
        "{status:?}"
    );
}

/// Issue #33 item 7: a downstream's own status passes through the shims unchanged: the HTTP
/// leaf's 404 is NOT_FOUND at the gRPC hop and 404 again at the HTTP edge, not 502.
#[tokio::test]
async fn a_downstreams_own_status_passes_through_the_shims_unchanged() {
    let leaf = http_leaf(Profile::default()).await;
    let mid = grpc_hop_with_http_downstream().await;
    let edge = http_edge(mid.url()).await;
    let res = client()
        .get(format!("{edge}/edge?next=http-shim:{leaf}/no-such-page"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    assert!(!res.headers().contains_key("x-deadline-outcome"));
    let text = res.text().await.unwrap();
    assert!(text.contains("NotFound"), "{text}");
}
