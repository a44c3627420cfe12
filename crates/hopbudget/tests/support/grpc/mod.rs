//! Shared pieces of the gRPC integration tests: the `Hop` handler wired to hopbudget, a
//! loopback tonic server, a tonic client through `GrpcClientLayer`, and a raw HTTP/2 client
//! for sending exact `grpc-timeout` bytes.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod peer;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use hopbudget::grpc::client::{GrpcClient, GrpcClientLayer};
use hopbudget::grpc::server::BudgetExt;
use hopbudget::grpc::server::GrpcServerLayer;
use hopbudget::{EndCause, Profile, RequestBudget};
use hopbudget_testkit::pb::hop_client::HopClient;
use hopbudget_testkit::pb::hop_server::{Hop, HopServer};
use hopbudget_testkit::pb::{CallReply, CallRequest};
use http_body_util::{BodyExt, Full};
use prost::Message;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use tower::ServiceBuilder;

/// What one server saw.
#[derive(Debug, Default)]
pub struct Stats {
    /// Handler entries.
    pub entered: AtomicUsize,
    /// Leaf work in flight right now.
    pub live: AtomicUsize,
    /// Leaf work that ran to its end.
    pub work_done: AtomicUsize,
    /// How each stopped piece of leaf work found its budget: ended how?
    pub work_stopped: Mutex<Vec<Option<EndCause>>>,
    /// Status codes this hop got from its downstream.
    pub downstream_codes: Mutex<Vec<tonic::Code>>,
    /// How each request's budget had ended when its handler was dropped or returned.
    pub request_end: Mutex<Vec<Option<EndCause>>>,
    /// Messages a `Watch` stream produced.
    pub streamed: AtomicUsize,
    /// Each request's budget at arrival, as its hop reports it.
    pub arrived: Mutex<Vec<Duration>>,
}

impl Stats {
    pub fn entered(&self) -> usize {
        self.entered.load(Ordering::SeqCst)
    }

    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Wait (real time, up to `limit`) until `cond` holds; returns whether it did.
    pub async fn wait_for(&self, limit: Duration, cond: impl Fn(&Stats) -> bool) -> bool {
        let start = tokio::time::Instant::now();
        while start.elapsed() < limit {
            if cond(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cond(self)
    }
}

struct LiveWork {
    stats: Arc<Stats>,
    budget: RequestBudget,
    done: bool,
}

impl Drop for LiveWork {
    fn drop(&mut self) {
        self.stats.live.fetch_sub(1, Ordering::SeqCst);
        if !self.done {
            self.stats
                .work_stopped
                .lock()
                .unwrap()
                .push(self.budget.end_cause());
        }
    }
}

struct RequestWatch {
    stats: Arc<Stats>,
    budget: RequestBudget,
}

impl Drop for RequestWatch {
    fn drop(&mut self) {
        self.stats
            .request_end
            .lock()
            .unwrap()
            .push(self.budget.end_cause());
    }
}

/// An HTTP downstream call, for shim tests: `http-shim:URL` entries are passed here.
pub type HttpCall = Arc<
    dyn Fn(
            String,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<CallReply, Status>> + Send>>
        + Send
        + Sync,
>;

/// The `Hop` service: reports the budget it saw, calls the next hop, or does leaf work.
#[derive(Clone)]
pub struct HopHandler {
    pub profile: Profile,
    pub stats: Arc<Stats>,
    pub http: Option<HttpCall>,
}

impl HopHandler {
    pub fn new(profile: Profile) -> Self {
        Self {
            profile,
            stats: Arc::new(Stats::default()),
            http: None,
        }
    }
}

/// The stream type of `Hop/Watch`.
pub type WatchStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<CallReply, Status>> + Send + 'static>>;

/// `count` replies, one every `interval`, counted in `stats.streamed`.
pub fn watch_stream(stats: Arc<Stats>, count: u32, interval: Duration) -> WatchStream {
    Box::pin(futures_util::stream::unfold(0u32, move |i| {
        let stats = stats.clone();
        async move {
            if i >= count {
                return None;
            }
            tokio::time::sleep(interval).await;
            stats.streamed.fetch_add(1, Ordering::SeqCst);
            let reply = CallReply {
                tag: i.to_string(),
                ..Default::default()
            };
            Some((Ok(reply), i + 1))
        }
    }))
}

#[tonic::async_trait]
impl Hop for HopHandler {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<CallRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.stats.entered.fetch_add(1, Ordering::SeqCst);
        let req = request.into_inner();
        Ok(Response::new(watch_stream(
            self.stats.clone(),
            req.count,
            Duration::from_millis(req.work_ms),
        )))
    }

    async fn call(&self, request: Request<CallRequest>) -> Result<Response<CallReply>, Status> {
        self.stats.entered.fetch_add(1, Ordering::SeqCst);
        // The one call a user's handler makes (issue #33), on every gRPC test's path; the
        // layer must also have put the budget in the extensions, not only in the task scope.
        let budget = request.budget()?;
        if request.extensions().get::<RequestBudget>().is_none() {
            return Err(Status::internal(
                "no RequestBudget in the request extensions",
            ));
        }
        let ambient =
            RequestBudget::current().ok_or_else(|| Status::internal("no ambient RequestBudget"))?;
        if !ambient.ptr_eq(&budget) {
            return Err(Status::internal(
                "ambient budget differs from the extension",
            ));
        }
        let _watch = RequestWatch {
            stats: self.stats.clone(),
            budget: budget.clone(),
        };
        self.stats.arrived.lock().unwrap().push(budget.at_arrival());
        let seen_us = budget.remaining().as_micros() as u64;
        let grpc_timeout = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let req = request.into_inner();
        let mut reply = CallReply {
            remaining_us: vec![seen_us],
            source: vec![budget.source().as_str().to_owned()],
            tag: req.tag.clone(),
            grpc_timeout: vec![grpc_timeout],
        };
        let Some((next, rest)) = req.downstream.split_first() else {
            if req.work_ms > 0 {
                let stats = self.stats.clone();
                let work = Duration::from_millis(req.work_ms);
                // Leaf work as a spawned child: it must stop when the request's budget ends
                // (C5, C7), not only when this handler is dropped.
                let handle = hopbudget::spawn(async move {
                    stats.live.fetch_add(1, Ordering::SeqCst);
                    let mut live = LiveWork {
                        stats: stats.clone(),
                        budget: RequestBudget::current().expect("spawn carries the budget"),
                        done: false,
                    };
                    tokio::time::sleep(work).await;
                    live.done = true;
                    stats.work_done.fetch_add(1, Ordering::SeqCst);
                });
                if let Err(e) = handle.await {
                    return Err(hopbudget::grpc::budget_status(
                        &e,
                        self.profile.grpc_status(),
                    ));
                }
            }
            return Ok(Response::new(reply));
        };
        let sub = CallRequest {
            work_ms: req.work_ms,
            downstream: rest.to_vec(),
            tag: req.tag,
            count: 0,
        };
        let down = if let Some(url) = next.strip_prefix("http-shim:") {
            let http = self
                .http
                .clone()
                .ok_or_else(|| Status::internal("no HTTP client configured"))?;
            // The HTTP leg gets the remaining hops as a JSON-free query: the test server
            // answers with its own budget.
            http(url.to_owned()).await
        } else {
            let mut client = grpc_client(&self.profile, next);
            client.call(sub).await.map(Response::into_inner)
        };
        match down {
            Ok(down) => {
                reply.remaining_us.extend(down.remaining_us);
                reply.source.extend(down.source);
                reply.grpc_timeout.extend(down.grpc_timeout);
                Ok(Response::new(reply))
            }
            Err(status) => {
                self.stats
                    .downstream_codes
                    .lock()
                    .unwrap()
                    .push(status.code());
                Err(status)
            }
        }
    }
}

/// A tonic client for `url` through `GrpcClientLayer`.
pub fn grpc_client(profile: &Profile, url: &str) -> HopClient<GrpcClient<Channel>> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .expect("valid url")
        .connect_lazy();
    HopClient::new(
        ServiceBuilder::new()
            .layer(GrpcClientLayer::new(profile.clone()))
            .service(channel),
    )
}

/// A plain tonic client (no hopbudget layer) for `url`.
pub fn plain_client(url: &str) -> HopClient<Channel> {
    HopClient::new(
        tonic::transport::Endpoint::from_shared(url.to_owned())
            .expect("valid url")
            .connect_lazy(),
    )
}

/// A running loopback server.
pub struct Server {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serve `handler` behind `GrpcServerLayer` on 127.0.0.1:0.
pub async fn serve(handler: HopHandler) -> Server {
    let layer = GrpcServerLayer::new(handler.profile.clone());
    serve_with_layer(handler, layer).await
}

/// Serve `handler` behind `layer` (built from a `SharedProfile`, say) on 127.0.0.1:0.
pub async fn serve_with_layer(handler: HopHandler, layer: GrpcServerLayer) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = handler.stats.clone();
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(HopServer::new(handler))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    Server { addr, stats, task }
}

/// Serve a profile named `service`.
pub async fn serve_profile(service: &str, profile: Profile) -> Server {
    serve(HopHandler::new(profile.with_service(service))).await
}

/// The budget a test client starts a request with.
pub fn budget(ms: u64) -> RequestBudget {
    RequestBudget::local(Duration::from_millis(ms), Profile::default().policy())
}

/// A call request.
pub fn call(downstream: &[&str], work_ms: u64) -> CallRequest {
    CallRequest {
        work_ms,
        downstream: downstream.iter().map(|s| s.to_string()).collect(),
        tag: "t".into(),
        count: 0,
    }
}

/// What a raw HTTP/2 call got back.
#[derive(Debug)]
pub struct Raw {
    pub http_status: u16,
    pub grpc_status: Option<String>,
    pub grpc_message: Option<String>,
    pub metadata: http::HeaderMap,
    /// The first reply message, if any.
    pub reply: Option<CallReply>,
    /// How many reply messages arrived.
    pub messages: usize,
}

/// Call `Hop/Call` over raw HTTP/2 with exactly these extra headers, no client timer.
pub async fn raw_call(addr: SocketAddr, headers: &[(&str, &str)], req: &CallRequest) -> Raw {
    raw_call_path(addr, hopbudget_testkit::HOP_CALL_PATH, headers, req).await
}

/// Like [`raw_call`] for any method path.
pub async fn raw_call_path(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    req: &CallRequest,
) -> Raw {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let mut body = BytesMut::new();
    body.put_u8(0);
    body.put_u32(req.encoded_len() as u32);
    req.encode(&mut body).unwrap();
    let mut builder = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let response = client
        .request(builder.body(Full::new(body.freeze())).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let mut data = collected.to_bytes();
    let mut all = parts.headers.clone();
    all.extend(trailers);
    let text = |name: &str| {
        all.get(name)
            .map(|v| percent_decode(v.to_str().unwrap_or("")))
    };
    let mut reply = None;
    let mut messages = 0;
    while data.len() >= 5 {
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        data.advance(5);
        let msg = data.split_to(len);
        if reply.is_none() {
            reply = Some(CallReply::decode(msg).unwrap());
        }
        messages += 1;
    }
    Raw {
        http_status: parts.status.as_u16(),
        grpc_status: text("grpc-status"),
        grpc_message: text("grpc-message"),
        metadata: all,
        reply,
        messages,
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
