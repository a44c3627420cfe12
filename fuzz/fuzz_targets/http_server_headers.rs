//! The HTTP server layer handed an arbitrary request: the first line is the request target, the
//! rest are `name:value` header lines. Whatever arrives, the layer answers (never panics) with
//! the handler's 200 or one of its own statuses, on a paused current-thread runtime so an
//! admitted request's deadline timer costs no wall time.
#![no_main]

use std::convert::Infallible;
use std::sync::OnceLock;

use bytes::Bytes;
use hopbudget::Profile;
use hopbudget::http::server::ServerBudgetLayer;
use http::{HeaderName, HeaderValue, Request, Response, Uri};
use http_body_util::{BodyExt, Empty, Full};
use libfuzzer_sys::fuzz_target;
use tower::{Layer, ServiceExt, service_fn};

/// Every carrier enabled, a refusing route and a streaming route, so each branch is reachable.
const PROFILE: &str = "
inbound: [grpc-timeout, relative-ms, epoch-ms, connect, envoy]
routes:
  - {path: /tax, min_budget_ms: 200}
  - {path: /events, mode: stream}
";

fn profile() -> &'static Profile {
    static PROFILE_ONCE: OnceLock<Profile> = OnceLock::new();
    PROFILE_ONCE.get_or_init(|| Profile::from_yaml(PROFILE, "fuzz.yaml").expect("valid profile"))
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|&b| b == b'\n');
    let uri = lines
        .next()
        .and_then(|first| Uri::try_from(first).ok())
        .unwrap_or_else(|| Uri::from_static("/"));
    let mut req = Request::new(Empty::<Bytes>::new());
    *req.uri_mut() = uri;
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(&line[colon + 1..]),
        ) else {
            continue;
        };
        req.headers_mut().append(name, value);
    }
    let service = ServerBudgetLayer::new(profile().clone()).layer(service_fn(
        |_req: Request<Empty<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        },
    ));
    runtime().block_on(async move {
        let res = service.oneshot(req).await.expect("infallible");
        let code = res.status().as_u16();
        assert!(
            matches!(code, 200 | 400 | 503 | 504),
            "unexpected status {code}"
        );
        let _ = res.into_body().collect().await;
    });
});
