//! gRPC layer benchmarks, in process: one unary `Hop/Call` through the tonic-generated
//! server service, with no layer, behind `tower::timeout::Timeout` (the same mechanism as
//! tonic's own server timeout, which tonic keeps crate-private), and behind hopbudget's
//! `GrpcServerLayer`. Also the client layer around an in-process stand-in for the channel.
//!
//! Run with `cargo bench -p hopbudget --features grpc --bench grpc_layers`.
//! Target: the hopbudget server layer at most 1.5x the `Timeout` stack.

use std::convert::Infallible;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use hopbudget::grpc::client::GrpcClientLayer;
use hopbudget::grpc::server::GrpcServerLayer;
use hopbudget::{Profile, RequestBudget};
use hopbudget_testkit::HOP_CALL_PATH;
use hopbudget_testkit::pb::hop_server::{Hop, HopServer};
use hopbudget_testkit::pb::{CallReply, CallRequest};
use http_body_util::{BodyExt, Full};
use prost::Message;
use tower::{Service, ServiceBuilder, ServiceExt};

fn main() {
    divan::main();
}

/// A handler that answers at once, so the layers are what is measured.
#[derive(Clone, Copy)]
struct Echo;

#[tonic::async_trait]
impl Hop for Echo {
    type WatchStream = futures_util::stream::Empty<Result<CallReply, tonic::Status>>;

    async fn watch(
        &self,
        _request: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Ok(tonic::Response::new(futures_util::stream::empty()))
    }

    async fn call(
        &self,
        request: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<CallReply>, tonic::Status> {
        Ok(tonic::Response::new(CallReply {
            tag: request.into_inner().tag,
            ..Default::default()
        }))
    }
}

fn body() -> Bytes {
    let msg = CallRequest {
        tag: "bench".into(),
        ..Default::default()
    };
    let mut buf = BytesMut::new();
    buf.put_u8(0);
    buf.put_u32(msg.encoded_len() as u32);
    msg.encode(&mut buf).unwrap();
    buf.freeze()
}

fn request(body: &Bytes) -> http::Request<Full<Bytes>> {
    http::Request::builder()
        .method("POST")
        .uri(HOP_CALL_PATH)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "1S")
        .body(Full::new(body.clone()))
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// One call: send the request, read the whole response body (trailers included).
async fn one<S, B>(svc: &mut S, body: &Bytes)
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(request(body))
        .await
        .unwrap();
    let collected = res.into_body().collect().await.unwrap();
    std::hint::black_box(collected);
}

mod server {
    use super::*;

    #[divan::bench]
    fn bare(b: divan::Bencher) {
        let rt = runtime();
        let body = body();
        let mut svc = HopServer::new(Echo);
        b.bench_local(|| rt.block_on(one(&mut svc, &body)));
    }

    #[divan::bench]
    fn tower_timeout(b: divan::Bencher) {
        let rt = runtime();
        let body = body();
        let mut svc = ServiceBuilder::new()
            .timeout(Duration::from_secs(1))
            .service(HopServer::new(Echo));
        b.bench_local(|| rt.block_on(one(&mut svc, &body)));
    }

    #[divan::bench]
    fn hopbudget_layer(b: divan::Bencher) {
        let rt = runtime();
        let body = body();
        let mut svc = ServiceBuilder::new()
            .layer(GrpcServerLayer::new(Profile::default()))
            .service(HopServer::new(Echo));
        b.bench_local(|| rt.block_on(one(&mut svc, &body)));
    }
}

mod client {
    use super::*;

    /// Stands in for the channel: answers an empty trailers-only OK at once.
    fn wire() -> impl Service<
        http::Request<Full<Bytes>>,
        Response = http::Response<Full<Bytes>>,
        Error = Infallible,
        Future = impl Send,
    > + Clone {
        tower::service_fn(|_req: http::Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(tonic::Status::ok("").into_http())
        })
    }

    #[divan::bench]
    fn bare(b: divan::Bencher) {
        let rt = runtime();
        let body = body();
        let mut svc = wire();
        b.bench_local(|| rt.block_on(one(&mut svc, &body)));
    }

    #[divan::bench]
    fn hopbudget_layer(b: divan::Bencher) {
        let rt = runtime();
        let body = body();
        let mut svc = ServiceBuilder::new()
            .layer(GrpcClientLayer::new(Profile::default()))
            .service(wire());
        let budget = RequestBudget::local(Duration::from_secs(3600), Profile::default().policy());
        b.bench_local(|| rt.block_on(budget.scope(one(&mut svc, &body))));
    }
}

/// Pieces of the server layer's per-call cost, to see where it goes.
mod parts {
    use super::*;
    use hopbudget::observe::{Hop, HopLabels, Protocol};

    #[divan::bench]
    fn hop_start_finish(b: divan::Bencher) {
        let budget = RequestBudget::local(Duration::from_secs(3600), Profile::default().policy());
        let labels = HopLabels::new("svc", HOP_CALL_PATH, Protocol::Grpc);
        b.bench_local(|| Hop::start(&labels, &budget).finish(hopbudget::Outcome::Completed));
    }

    #[divan::bench]
    fn labels(b: divan::Bencher) {
        let svc: std::sync::Arc<str> = "svc".into();
        b.bench_local(|| HopLabels::new(svc.clone(), HOP_CALL_PATH, Protocol::Grpc));
    }

    #[divan::bench]
    fn extensions_insert(b: divan::Bencher) {
        let budget = RequestBudget::local(Duration::from_secs(3600), Profile::default().policy());
        b.bench_local(|| {
            let mut e = http::Extensions::new();
            e.insert(budget.clone());
            e
        });
    }
}
