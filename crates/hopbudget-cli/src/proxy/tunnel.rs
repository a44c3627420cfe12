//! WebSocket through the sidecar (issue #46 item 6): the handshake is a request like any
//! other, under its budget, recorded as a hop when the service answers `101 Switching
//! Protocols`; the connection it opens then lives on its own, bounded by `--tunnel-max`, and
//! is closed at that limit. Bytes in a tunnel are the two ends' own: the proxy judges the
//! handshake, not the frames.
//!
//! Every other `Upgrade` is refused with a reason (400): `h2c` is a known request-smuggling
//! route through proxies (a service that accepts it would take requests the proxy never
//! judged), and others are protocols the proxy cannot judge.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Version, header};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::body::ProxyBody;
use super::body::full;
use super::client_waits::Connection;

/// Tunnels closed, by why: `limit` (`--tunnel-max`), `closed` (an end closed it), `failed`.
pub(crate) const TUNNELS_TOTAL: &str = "hopbudget_proxy_tunnels_total";

/// A WebSocket handshake on its way to the service: what its `Upgrade` said, and the caller's
/// side of the connection, handed over once the answer is sent.
#[derive(Clone, Debug)]
pub(crate) struct WebSocket {
    upgrade: HeaderValue,
    caller: OnUpgrade,
    connection: Option<Connection>,
}

/// What an `Upgrade` on `req` means: nothing to do, a WebSocket handshake (its `WebSocket`
/// put in the request's extensions), or `Some` answer refusing it.
pub(crate) fn inspect<B>(req: &mut Request<B>) -> Option<Response<ProxyBody>> {
    let upgrade = req.headers().get(header::UPGRADE)?.clone();
    let websocket = upgrade.to_str().is_ok_and(|v| {
        v.split(',')
            .any(|p| p.trim().eq_ignore_ascii_case("websocket"))
    });
    if !websocket || req.version() != Version::HTTP_11 || req.method() != http::Method::GET {
        let mut res = Response::new(full(Bytes::from(format!(
            "hopbudget proxy: `Upgrade: {}` is not passed on; only a WebSocket handshake (GET, \
             HTTP/1.1) is\n",
            upgrade.to_str().unwrap_or("?")
        ))));
        *res.status_mut() = StatusCode::BAD_REQUEST;
        return Some(res);
    }
    let caller = hyper::upgrade::on(&mut *req);
    let connection = req.extensions_mut().remove::<Connection>();
    req.extensions_mut().insert(WebSocket {
        upgrade,
        caller,
        connection,
    });
    None
}

impl WebSocket {
    /// Put back the headers that ask the service to switch: hop-by-hop, so the forwarding
    /// removed them.
    pub(crate) fn restore_request(&self, headers: &mut http::HeaderMap) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, self.upgrade.clone());
    }

    /// The service answered the handshake: with `101`, join the two connections for at most
    /// `max` (in a task of their own) and keep the headers the caller needs; anything else is
    /// an ordinary answer.
    pub(crate) fn open<B>(self, res: &mut Response<B>, max: Duration) {
        if res.status() != StatusCode::SWITCHING_PROTOCOLS {
            return;
        }
        let service = hyper::upgrade::on(&mut *res);
        res.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        if !res.headers().contains_key(header::UPGRADE) {
            res.headers_mut()
                .insert(header::UPGRADE, self.upgrade.clone());
        }
        let caller = self.caller;
        // The caller's connection carries the tunnel now: not idle, whatever its traffic.
        let held = self.connection.as_ref().map(Connection::hold);
        tokio::spawn(async move {
            let _held = held;
            let why = match tokio::try_join!(caller, service) {
                Ok((caller, service)) => {
                    let (mut caller, mut service) = (TokioIo::new(caller), TokioIo::new(service));
                    match tokio::time::timeout(
                        max,
                        tokio::io::copy_bidirectional(&mut caller, &mut service),
                    )
                    .await
                    {
                        Err(_) => "limit",
                        Ok(_) => "closed",
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "a WebSocket handshake did not switch");
                    "failed"
                }
            };
            metrics::counter!(TUNNELS_TOTAL, "end" => why).increment(1);
        });
    }
}
