//! A pooled connection lent to one call, and what becomes of it afterwards (rule [C22](crate::contract#c22)).
//!
//! A PostgreSQL cancel request names a backend (its process id and secret key), not a
//! statement, and the server acts on it whenever the signal arrives: tokio-postgres's
//! `cancel_query` returns once the request is written, and nothing ever tells the client that
//! it has landed. A statement that ends on its own (its statement timeout, its last row) just
//! as the cancel goes out leaves the cancel in flight, and it then kills whatever that backend
//! runs next, which on a pooled connection is the next request's statement ("canceling
//! statement due to user request", issue #32). Even a 57014 answer does not prove that *our*
//! cancel was the one that landed: an operator's `pg_cancel_backend` reads the same.
//!
//! So, like Go's pgx (whose connection is closed, not reused, once a query's context ended
//! with a cancel possibly in flight), a connection to which a cancel was or may have been sent
//! is detached from the pool and closed, never handed to anyone else. Closing ends its backend,
//! so a late cancel finds no backend to act on (a new backend that reuses the process id has
//! another secret key, and the server ignores it). The price is one new connection per budget
//! that ended mid-query, which is what it takes to be sure.

use std::time::Duration;

use deadpool_postgres::Object;
use tokio_postgres::{CancelToken, NoTls};

/// How long sending a cancel request may take before the connection is closed anyway.
const SEND_CANCEL_WITHIN: Duration = Duration::from_secs(2);

/// What a call leaves its connection fit for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum After {
    /// Idle, no cancel sent: it goes back to the pool.
    Reuse,
    /// A cancel was sent (or the connection died): it is closed, never reused.
    Discard,
}

/// A pooled connection lent to one call. Dropped before [`InFlight::settle`] (the caller's
/// future was dropped, maybe mid-statement), it sends a cancel request so the server stops
/// the work ([C7](crate::contract#c7)), then discards the connection ([C22](crate::contract#c22)).
pub(super) struct InFlight {
    conn: Option<Object>,
}

impl InFlight {
    pub(super) fn new(conn: Object) -> Self {
        Self { conn: Some(conn) }
    }

    /// The connection, for the call's statements.
    pub(super) fn client(&mut self) -> &mut deadpool_postgres::ClientWrapper {
        match self.conn.as_deref_mut() {
            Some(client) => client,
            None => unreachable!("the connection is only taken by settle or drop"),
        }
    }

    /// The call is over: give the connection back or close it.
    pub(super) fn settle(mut self, after: After) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        match after {
            After::Reuse if !conn.is_closed() => drop(conn),
            _ => discard(conn),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(cancel_then_discard(conn.cancel_token(), conn));
            }
            // No runtime to send the cancel from: close the connection, which stops the
            // server's work the next time it writes to the socket.
            Err(_) => discard(conn),
        }
    }
}

/// Stop the server's work, then close the connection. The pool slot stays taken until the
/// cancel is sent, so the pool never has more backends working on the server than its size
/// allows, even for a moment.
async fn cancel_then_discard(cancel: CancelToken, conn: Object) {
    match tokio::time::timeout(SEND_CANCEL_WITHIN, cancel.cancel_query(NoTls)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not send a cancel request"),
        Err(_) => tracing::debug!("sending a cancel request timed out"),
    }
    discard(conn);
}

/// Detach the connection from the pool and close it: the pool opens a new one when needed.
pub(super) fn discard(conn: Object) {
    drop(Object::take(conn));
}
