//! The answers the proxy makes when the call to the service fails: the deadline outcomes in
//! the profile's spelling (C10), anything else as the gateway error it is.
//!
//! The client layer fails a call with a [`BudgetError`]: refused before it left (C3), the
//! budget spent while waiting (C4), or the request cancelled. Those are answered as a
//! hopbudget server answers them, marked with `x-deadline-outcome`, so the server layer above
//! records that outcome for the hop (C17). A service that cannot be reached is 502 Bad
//! Gateway, or UNAVAILABLE for a gRPC caller: the deadline contract held, the service did not.

use bytes::Bytes;
use hopbudget::{BudgetError, Profile};
use http::{HeaderValue, Response, StatusCode};
use tower::BoxError;

use std::error::Error as _;

use super::body::{ProxyBody, full};
use super::caller_body;
use super::client_waits::CLOSED_TOTAL;
use super::hygiene;

/// The answer to a failed call to the service.
pub(crate) fn failure(error: &BoxError, profile: &Profile, grpc: bool) -> Response<ProxyBody> {
    match BudgetError::find(&**error) {
        Some(budget) if grpc => {
            let status = hopbudget::grpc::budget_status(budget, profile.grpc_status());
            let (parts, ()) = status.into_http::<()>().into_parts();
            Response::from_parts(parts, empty())
        }
        Some(budget) => hopbudget::http::budget_response(budget, profile.http_status()).map(full),
        None => {
            if let Some(stalled) = caller_body::stalled(&**error) {
                // The caller stopped sending its body: a wait bound, not the service's
                // failure (#46 item 1). nginx answers 408 and closes.
                metrics::counter!(CLOSED_TOTAL, "reason" => "body_read_timeout").increment(1);
                let message = format!("hopbudget proxy: {stalled}");
                return if grpc {
                    grpc_error(1, &message)
                } else {
                    let mut res = Response::new(full(Bytes::from(message + "\n")));
                    *res.status_mut() = StatusCode::REQUEST_TIMEOUT;
                    res.headers_mut()
                        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                    res
                };
            }
            if let Some(why) = caller_body_failed(&**error) {
                // The caller's framing, not the service: a 400, never a 502 that blames the
                // service (#46 item 4).
                hygiene::count(profile, hygiene::Reason::MalformedBody);
                let message = format!("hopbudget proxy: the request body could not be read: {why}");
                return if grpc {
                    grpc_error(3, &message)
                } else {
                    let mut res = Response::new(full(Bytes::from(message + "\n")));
                    *res.status_mut() = StatusCode::BAD_REQUEST;
                    res
                };
            }
            tracing::warn!(error = %error, "upstream call failed");
            if grpc {
                grpc_unavailable()
            } else {
                let mut res = Response::new(full(Bytes::from(format!(
                    "hopbudget proxy: the service behind the proxy could not be reached: {error}\n"
                ))));
                *res.status_mut() = StatusCode::BAD_GATEWAY;
                res
            }
        }
    }
}

/// When the call failed because the caller's own body could not be read (a malformed chunk
/// size, say), what was wrong with it. hyper's client fails a call whose body stream failed
/// as a user error whose source is the stream's error; the proxy's stream is the caller's
/// `Incoming`, whose errors are hyper's too. A caller that went away mid-body (an incomplete
/// message, a cancelled stream) is no malformed body.
fn caller_body_failed(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(user) = e.downcast_ref::<hyper::Error>().filter(|h| h.is_user()) {
            let body = user.source()?.downcast_ref::<hyper::Error>()?;
            if body.is_incomplete_message() || body.is_canceled() || body.is_closed() {
                return None;
            }
            let mut why = body.to_string();
            if let Some(cause) = body.source() {
                why = format!("{why}: {cause}");
            }
            return Some(why);
        }
        next = e.source();
    }
    None
}

/// A trailers-only gRPC answer: UNAVAILABLE (14), the status a gRPC client retries on.
fn grpc_unavailable() -> Response<ProxyBody> {
    grpc_error(14, "the service behind the proxy could not be reached")
}

/// A trailers-only gRPC answer with `code` and `message` (percent-encoded as gRPC asks).
pub(crate) fn grpc_error(code: u8, message: &str) -> Response<ProxyBody> {
    let encoded = grpc_message(message);
    let mut res = Response::new(empty());
    let headers = res.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", HeaderValue::from(u16::from(code)));
    if let Ok(message) = HeaderValue::from_str(&encoded) {
        headers.insert("grpc-message", message);
    }
    res
}

/// gRPC's `grpc-message` spelling: percent-encode what is not printable ASCII, and `%` itself.
fn grpc_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn empty() -> ProxyBody {
    full(Bytes::new())
}
