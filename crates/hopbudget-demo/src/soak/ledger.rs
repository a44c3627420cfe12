//! What each hop counts, from outside its budget layer: every arrival, and how each request
//! ended, exactly once, even when hyper drops it unanswered.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

/// How a hop's request ended, from its answer (or from being dropped unanswered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    Completed,
    Refused,
    Expired,
    Cancelled,
    Malformed,
    /// Anything else: an answer the chain should never give. Counted so the sum shows it.
    Other,
}

impl End {
    const ALL: [End; 6] = [
        End::Completed,
        End::Refused,
        End::Expired,
        End::Cancelled,
        End::Malformed,
        End::Other,
    ];

    fn of(res: &Response) -> End {
        let marker = res
            .headers()
            .get("x-deadline-outcome")
            .map(HeaderValue::as_bytes);
        match (res.status().as_u16(), marker) {
            (200, _) => End::Completed,
            (_, Some(b"refused")) => End::Refused,
            (_, Some(b"malformed")) | (400, _) => End::Malformed,
            (504, _) => End::Expired,
            (499, _) => End::Cancelled,
            _ => End::Other,
        }
    }
}

/// One hop's ledger.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    pub(super) arrived: AtomicU64,
    ended: [AtomicU64; 6],
    /// Hop futures alive right now (each owns at most one deadline timer).
    pub(super) in_flight: AtomicU64,
}

impl Ledger {
    pub(super) fn ended(&self, end: End) -> u64 {
        self.ended[End::ALL.iter().position(|e| *e == end).unwrap_or(5)].load(Ordering::SeqCst)
    }

    pub(super) fn total_ended(&self) -> u64 {
        End::ALL.iter().map(|e| self.ended(*e)).sum()
    }
}

/// Records how one request ended at a hop, exactly once, even if hyper drops it unanswered.
struct Entry {
    ledger: Arc<Ledger>,
    end: Option<End>,
}

impl Entry {
    fn new(ledger: Arc<Ledger>) -> Self {
        ledger.arrived.fetch_add(1, Ordering::SeqCst);
        ledger.in_flight.fetch_add(1, Ordering::SeqCst);
        Self {
            ledger,
            end: Some(End::Cancelled),
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(end) = self.end.take() {
            let i = End::ALL.iter().position(|e| *e == end).unwrap_or(5);
            self.ledger.ended[i].fetch_add(1, Ordering::SeqCst);
        }
        self.ledger.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Outside the budget layer: counts the arrival and how it ended.
pub(super) async fn account(
    State(ledger): State<Arc<Ledger>>,
    req: Request,
    next: Next,
) -> Response {
    let mut entry = Entry::new(ledger);
    let res = next.run(req).await;
    entry.end = Some(End::of(&res));
    res
}
