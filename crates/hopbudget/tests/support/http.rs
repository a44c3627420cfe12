//! Shared pieces of the HTTP integration tests: real axum servers on 127.0.0.1:0 and reqwest
//! clients through the budget middleware.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use hopbudget::http::reqwest::{BudgetMiddleware, budget_error};
use hopbudget::{BudgetError, Profile};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

/// Serve `router` on a fresh loopback port; returns `http://127.0.0.1:PORT`.
pub async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// A reqwest client with the budget middleware.
pub fn client(profile: &Profile) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(profile.clone()))
        .build()
}

pub fn profile(yaml: &str) -> Profile {
    Profile::from_yaml(yaml, "test-profile").unwrap()
}

/// How a handler reports a failed downstream call: the deadline outcome keeps its status.
pub fn fail(e: &reqwest_middleware::Error) -> (StatusCode, String) {
    let code = match budget_error(e) {
        Some(BudgetError::Expired) => StatusCode::GATEWAY_TIMEOUT,
        Some(BudgetError::Cancelled) => StatusCode::from_u16(499).unwrap(),
        Some(BudgetError::Refused(_)) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_GATEWAY,
    };
    (code, e.to_string())
}

/// Poll `cond` every 10 ms until it holds or `limit` passes; whether it held.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Counts work in progress: +1 on creation, -1 on drop.
#[derive(Clone, Debug, Default)]
pub struct Live(Arc<AtomicU64>);

impl Live {
    pub fn enter(&self) -> LiveGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        LiveGuard(self.0.clone())
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Debug)]
pub struct LiveGuard(Arc<AtomicU64>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A minimal `tracing` subscriber that keeps the fields of every span, so a test can read
/// what a hop's trace shows. Install with `tracing::subscriber::set_default` on a
/// current-thread runtime.
type SpanFields = (String, HashMap<String, String>);

#[derive(Clone, Debug, Default)]
pub struct SpanCapture {
    spans: Arc<Mutex<Vec<SpanFields>>>,
}

impl SpanCapture {
    /// Fields of every span named `name`, in creation order.
    pub fn spans(&self, name: &str) -> Vec<HashMap<String, String>> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .collect()
    }
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for SpanCapture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let mut spans = self.spans.lock().unwrap();
        spans.push((attrs.metadata().name().to_owned(), fields));
        tracing::span::Id::from_u64(spans.len() as u64)
    }
    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some((_, fields)) = spans.get_mut(span.into_u64() as usize - 1) {
            values.record(&mut Fields(fields));
        }
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
