//! What every outbound call does, whichever client carries it: pick the budget ([C8](crate::contract#c8)), narrow
//! it to the call's own timeout ([C16](crate::contract#c16)), decide whether the destination may see deadline
//! headers ([C19](crate::contract#c19)), stamp the carrier, classify the reply. Shared by the HTTP tower layer, the
//! reqwest middleware and the gRPC client layer.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName};

mod bound;
pub(crate) mod reply;

use crate::clock::{SystemClock, WallClock};
use crate::codec::{self, Carrier, marker};
use crate::outcome::Outcome;
use crate::profile::UnknownDestination;
use crate::status::HttpStatusMap;
use crate::{
    budget::Deadline, budget::RequestBudget, error::BudgetError, error::Refused,
    profile::shared::SharedProfile,
};
pub(crate) use bound::Bound;

/// Which destinations a client layer sends deadline headers to ([C19](crate::contract#c19)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trust {
    /// The profile's `outbound.trusted_hosts` decides, by every host the call names (the
    /// layer's destination, the request URI's host, the `Host` header); a call that names none
    /// follows `outbound.unknown_destination`.
    Profile,
    /// Every destination (the layer's owner vouches for it).
    All,
    /// No destination: the wait is bounded, nothing is stamped.
    Nobody,
}

#[derive(Clone, Debug)]
pub(crate) struct Shared {
    pub(crate) profile: SharedProfile,
    pub(crate) service: Arc<str>,
    pub(crate) trust: Trust,
    /// The host every call of this layer reaches, named when the layer was built (a tonic
    /// channel's endpoint: its requests carry only the method path, [C19](crate::contract#c19)).
    pub(crate) destination: Option<Arc<str>>,
    /// The carrier calls are stamped in, when the layer's owner chose one (a sidecar telling a
    /// gRPC service in `grpc-timeout`); otherwise the profile's outbound HTTP carrier.
    pub(crate) carrier: Option<(Carrier, HeaderName)>,
}

/// One outbound call, planned: the budget it runs under, what the callee is told, how long
/// this hop waits, and whether the destination may see deadline headers.
#[derive(Debug)]
pub(crate) struct Call {
    /// The request's budget, or a child narrowed to the call's own timeout ([C16](crate::contract#c16)).
    pub(crate) budget: RequestBudget,
    /// The budget whose cancellation aborts the call (the request's; [C5](crate::contract#c5), [C7](crate::contract#c7)).
    pub(crate) watched: RequestBudget,
    /// What the callee may use ([C2](crate::contract#c2)).
    pub(crate) forward: Duration,
    /// The callee's deadline, on this clock: `forward` from when the call was planned. A
    /// `cancelled` answer that arrives after it is expiry ([C4](crate::contract#c4), [`reply::settle`]).
    pub(crate) told: Deadline,
    /// When this hop stops waiting: the call's deadline minus the hop margin ([S4](crate::contract#s4)).
    pub(crate) wait_until: Deadline,
    /// Whether deadline headers go out ([C19](crate::contract#c19)).
    pub(crate) trusted: bool,
}

impl Shared {
    pub(crate) fn new(profile: impl Into<SharedProfile>) -> Arc<Self> {
        let profile = profile.into();
        let service = Arc::from(profile.current().service());
        Arc::new(Self {
            profile,
            service,
            trust: Trust::Profile,
            destination: None,
            carrier: None,
        })
    }

    /// A copy of `shared` that stamps `carrier`, under its default header name.
    pub(crate) fn with_carrier(shared: &Arc<Self>, carrier: Carrier) -> Arc<Self> {
        let mut copy = Self::clone(shared);
        copy.carrier = Some((carrier, HeaderName::from_static(carrier.default_header())));
        Arc::new(copy)
    }

    /// The carrier this layer stamps and reads a hand-set timeout from, and its header name.
    #[inline]
    fn carrier<'a>(&'a self, profile: &'a crate::profile::Profile) -> (Carrier, &'a HeaderName) {
        match &self.carrier {
            Some((carrier, name)) => (*carrier, name),
            None => profile.outbound_http(),
        }
    }

    /// A copy of `shared` with another trust mode.
    pub(crate) fn with_trust(shared: &Arc<Self>, trust: Trust) -> Arc<Self> {
        let mut copy = Self::clone(shared);
        copy.trust = trust;
        Arc::new(copy)
    }

    /// A copy of `shared` whose calls all reach `host` ([C19](crate::contract#c19)).
    pub(crate) fn with_destination(shared: &Arc<Self>, host: Option<&str>) -> Arc<Self> {
        let mut copy = Self::clone(shared);
        copy.destination = host.map(Arc::from);
        Arc::new(copy)
    }

    /// Whether a call may carry deadline headers ([C19](crate::contract#c19), [S16](crate::contract#s16)). Every host the call names must be
    /// trusted: the layer's destination, the request URI's host (`uri_host`) and the `Host`
    /// header (`host_header`). They differ when the URI is not where the call goes: a request
    /// to an egress proxy or sidecar on loopback whose `Host` names a third party goes to the
    /// third party. A call that names no host at all (a tonic channel's path-only request from
    /// a layer built without [`with_destination`](Self::with_destination), an in-process
    /// service) follows the profile's `outbound.unknown_destination`.
    pub(crate) fn trusts(&self, uri_host: Option<&str>, host_header: Option<&str>) -> bool {
        match self.trust {
            Trust::All => true,
            Trust::Nobody => false,
            Trust::Profile => {
                let profile = self.profile.current();
                let allowed = profile.trusted_hosts();
                let mut named = false;
                for host in [self.destination.as_deref(), uri_host, host_header]
                    .into_iter()
                    .flatten()
                {
                    named = true;
                    if !allowed.allows(host) {
                        return false;
                    }
                }
                named || profile.spec().outbound.unknown_destination == UnknownDestination::Trusted
            }
        }
    }

    /// Plan a call: the budget (explicit, ambient or the edge total, [C8](crate::contract#c8)), narrowed to the
    /// call's own timeout if the application set one ([C16](crate::contract#c16): the tighter wins, never the
    /// looser), then admitted ([C3](crate::contract#c3): refused below the threshold, before any connection).
    pub(crate) fn plan(
        &self,
        explicit: Option<&RequestBudget>,
        per_call: Option<Duration>,
        uri_host: Option<&str>,
        host_header: Option<&str>,
    ) -> Result<Call, BudgetError> {
        let (watched, outside) = self.budget_for(explicit);
        if outside {
            self.count_missing(uri_host, host_header);
        }
        let budget = match per_call {
            Some(timeout) if Deadline::after(timeout) < watched.deadline() => {
                watched.child_until(Deadline::after(timeout))
            }
            _ => watched.clone(),
        };
        let forward = budget.admit_forward()?;
        // The callee was told `forward`; its reply gets the transit allowance to come back;
        // the hop margin stays with this hop (S4). So the wait ends at deadline - margin.
        let wait_until = budget.deadline().saturating_sub(budget.policy().hop_margin);
        Ok(Call {
            budget,
            watched,
            forward,
            told: Deadline::after(forward),
            wait_until,
            trusted: self.trusts(uri_host, host_header),
        })
    }

    /// The explicit budget, else the ambient one, else a fresh one from the edge total: a call
    /// made outside any request is never unbounded ([C8](crate::contract#c8)). With whether
    /// it was the last: a call outside any request, which carries no deadline it was given.
    pub(crate) fn budget_for(&self, explicit: Option<&RequestBudget>) -> (RequestBudget, bool) {
        if let Some(budget) = explicit {
            return (budget.clone(), false);
        }
        if let Some(budget) = RequestBudget::current() {
            return (budget, false);
        }
        (self.fallback(), true)
    }

    #[cold]
    fn fallback(&self) -> RequestBudget {
        let edge_total = self.profile.current().edge_total();
        tracing::debug!(
            service = %self.service,
            edge_total_ms = edge_total.as_millis() as u64,
            "deadline received: none; outbound call outside any request uses the edge total"
        );
        RequestBudget::fallback(edge_total, self.profile.current().policy())
    }

    /// Count a call outside any request in `hopbudget_deadline_missing_total{route="(outbound)"}`
    /// ([C8](crate::contract#c8)), by the callee it reaches: the host a call goes to (the
    /// layer's destination, else the `Host` header, which names the third party behind an
    /// egress proxy, else the URI's host), labelled by the profile's trusted pattern that
    /// covers it, `other` when none does or when the layer trusts nobody.
    #[cold]
    fn count_missing(&self, uri_host: Option<&str>, host_header: Option<&str>) {
        let host = match self.trust {
            Trust::Nobody => None,
            Trust::Profile | Trust::All => self.destination.as_deref().or(host_header).or(uri_host),
        };
        let profile = self.profile.current();
        crate::observe::outbound_missing_to(&self.service, profile.trusted_hosts(), host);
    }

    /// Write the forward budget into this layer's carrier ([C2](crate::contract#c2): the
    /// codec rounds down).
    pub(crate) fn stamp(&self, headers: &mut HeaderMap, forward: Duration) {
        let profile = self.profile.current();
        let (carrier, name) = self.carrier(&profile);
        let value = carrier.encode(forward, || SystemClock.now_unix_ms());
        headers.insert(name.clone(), value.to_header_value());
    }

    /// Stamp the call's forward budget for a trusted destination, or remove every deadline
    /// header for an untrusted one ([C19](crate::contract#c19), [S16](crate::contract#s16)).
    pub(crate) fn stamp_http(&self, headers: &mut HeaderMap, call: &Call) {
        if call.trusted {
            self.stamp(headers, call.forward);
        } else {
            self.strip(headers);
        }
    }

    /// A timeout the application put on the request by hand in this layer's carrier
    /// ([C16](crate::contract#c16)). A value that does not parse is replaced by the stamp, not
    /// trusted.
    pub(crate) fn hand_set_http(&self, headers: &HeaderMap) -> Option<Duration> {
        let profile = self.profile.current();
        let (carrier, name) = self.carrier(&profile);
        let value = headers.get(name)?.as_bytes();
        carrier.decode(value, || SystemClock.now_unix_ms()).ok()
    }

    /// Remove every header that would tell a third party about this system's deadlines: the
    /// well-known carriers, this layer's own, and hopbudget's `x-deadline-*` markers.
    pub(crate) fn strip(&self, headers: &mut HeaderMap) {
        let profile = self.profile.current();
        let (_, ours) = self.carrier(&profile);
        codec::remove_deadline_headers(headers, |name| {
            name == ours || name.as_str().starts_with("x-deadline-")
        });
    }

    pub(crate) fn status(&self) -> HttpStatusMap {
        *self.profile.current().http_status()
    }
}

/// How a downstream reply ended, as the deadline rules see it ([C4](crate::contract#c4), [C10](crate::contract#c10)).
///
/// The `x-deadline-outcome` header that hopbudget servers put on their own answers decides
/// first; otherwise the status code is read through `map`. A `refused` status without the
/// `x-deadline-required-ms` header is an ordinary overload answer, not a deadline refusal, and
/// counts as `completed`.
///
/// This reads the reply alone. The client layers add one rule that needs the caller's budget:
/// an unmarked expiry status (a bare 504) that arrives while the caller could still forward a
/// call (its forward budget is at or above the refuse threshold) did not come from this
/// request's deadline: a proxy or gateway on the way gave up on its own, shorter timeout (the
/// chain break of [S13](crate::contract#s13)). The layers return that reply as it is, an upstream failure for the
/// handler to map (say to 502), log it, and do not turn it into [`BudgetError::Expired`]:
/// the request still has time, and [C6](crate::contract#c6) lets a retry spend it.
///
/// See the [module example](super#example).
#[inline]
pub fn classify(map: &HttpStatusMap, status: u16, headers: &HeaderMap) -> Outcome {
    codec::answer::http_outcome(map, status, headers)
}

/// The error a classified reply turns into; `None` for a completed call, and for a proxy's
/// own timeout while `budget` still has time (see [`classify`]). A `cancelled` answer that
/// arrives after `told`, the callee's deadline, is expiry ([C4](crate::contract#c4), [`reply::settle`]), as the
/// gRPC client reads it.
pub(crate) fn reply_error(
    map: &HttpStatusMap,
    status: u16,
    headers: &HeaderMap,
    budget: &RequestBudget,
    told: Deadline,
) -> Option<BudgetError> {
    let stated = classify(map, status, headers);
    match reply::settle(stated, told, budget) {
        Outcome::Completed => None,
        Outcome::Expired if stated == Outcome::Cancelled => Some(BudgetError::Expired),
        Outcome::Expired if is_proxy_timeout(headers, budget) => {
            tracing::warn!(
                status,
                forward_ms = budget.forward().as_millis() as u64,
                "downstream answered with an unmarked expiry status while budget remains: \
                 a proxy's own timeout (chain break, S13), returned as an upstream failure"
            );
            None
        }
        Outcome::Expired => Some(BudgetError::Expired),
        Outcome::Cancelled => Some(BudgetError::Cancelled),
        // A refusal that does not say what it needed still refused.
        Outcome::Refused => Some(BudgetError::Refused(
            marker::refusal(headers).unwrap_or(Refused::new(Duration::ZERO, Duration::ZERO)),
        )),
    }
}

/// The host a `Host` header names (without its port), if the request has one.
pub(crate) fn host_header(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::HOST)?.to_str().ok()?;
    // `host:port`, `[v6]:port`, or a bare host.
    Some(match value.rfind(':') {
        Some(i)
            if !value[i..].contains(']')
                && (value.starts_with('[') || !value[..i].contains(':')) =>
        {
            &value[..i]
        }
        _ => value,
    })
}

/// An expiry status without hopbudget's marker, while the caller could still start a call:
/// not this request's deadline (a hopbudget server always marks its own expiry).
fn is_proxy_timeout(headers: &HeaderMap, budget: &RequestBudget) -> bool {
    marker::Fields::field(headers, marker::Field::Outcome).is_none()
        && budget.forward() >= budget.policy().refuse_below
}

/// The error for a wait that the parent budget ended: its recorded cause.
pub(crate) fn ended(budget: &RequestBudget) -> BudgetError {
    budget
        .end_cause()
        .map_or(BudgetError::Cancelled, BudgetError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;

    /// A callee deadline that has not passed.
    fn later() -> Deadline {
        Deadline::after(Duration::from_secs(60))
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    http::HeaderName::from_static(k),
                    http::HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    #[test]
    fn a_downstream_504_is_expired_not_cancelled() {
        let map = HttpStatusMap::default();
        let spent = RequestBudget::local(Duration::from_millis(3), Profile::default().policy());
        assert_eq!(classify(&map, 504, &HeaderMap::new()), Outcome::Expired);
        assert_eq!(
            reply_error(&map, 504, &HeaderMap::new(), &spent, later()),
            Some(BudgetError::Expired)
        );
        assert_eq!(classify(&map, 499, &HeaderMap::new()), Outcome::Cancelled);
        assert_eq!(
            reply_error(&map, 200, &HeaderMap::new(), &spent, later()),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_proxys_own_504_while_budget_remains_is_not_an_expiry() {
        let map = HttpStatusMap::default();
        let plenty = RequestBudget::local(Duration::from_secs(2), Profile::default().policy());
        // A bare 504 with 2 s left: some proxy's own timeout, returned as is.
        assert_eq!(
            reply_error(&map, 504, &HeaderMap::new(), &plenty, later()),
            None
        );
        // A hopbudget server's own expiry is marked, and is one whatever the caller has left.
        let marked = headers(&[("x-deadline-outcome", "expired")]);
        assert_eq!(
            reply_error(&map, 504, &marked, &plenty, later()),
            Some(BudgetError::Expired)
        );
        // With less than the refuse threshold to forward, the time is up: a bare 504 is expired.
        let nearly = RequestBudget::local(Duration::from_millis(15), Profile::default().policy());
        assert_eq!(
            reply_error(&map, 504, &HeaderMap::new(), &nearly, later()),
            Some(BudgetError::Expired)
        );
    }

    #[test]
    fn refusal_needs_the_required_header() {
        let map = HttpStatusMap::default();
        assert_eq!(classify(&map, 503, &HeaderMap::new()), Outcome::Completed);
        let h = headers(&[
            ("x-deadline-required-ms", "200"),
            ("x-deadline-remaining-ms", "114"),
        ]);
        let plenty = RequestBudget::local(Duration::from_secs(2), Profile::default().policy());
        assert_eq!(
            reply_error(&map, 503, &h, &plenty, later()),
            Some(BudgetError::Refused(Refused::new(
                Duration::from_millis(200),
                Duration::from_millis(114)
            )))
        );
    }

    #[test]
    fn the_outcome_header_wins_over_a_shared_status_code() {
        // A profile may map refused and expired to one code; the header still tells them apart.
        let map = HttpStatusMap {
            refused: 504,
            ..HttpStatusMap::default()
        };
        let h = headers(&[
            ("x-deadline-outcome", "refused"),
            ("x-deadline-required-ms", "5"),
        ]);
        assert_eq!(classify(&map, 504, &h), Outcome::Refused);
    }

    #[tokio::test(start_paused = true)]
    async fn outside_any_request_the_edge_total_applies() {
        // That the fallback is counted: `observe::counter`'s tests.
        let shared = Shared::new(Profile::default().with_service("cron"));
        let (budget, outside) = shared.budget_for(None);
        assert!(outside);
        assert_eq!(budget.source(), crate::budget::Source::Fallback);
        assert_eq!(
            budget.remaining(),
            shared.profile.current().edge_total(),
            "C8: never unbounded"
        );
        // The ambient budget wins over the fallback, the explicit one over both.
        let ambient =
            RequestBudget::local(Duration::from_millis(50), shared.profile.current().policy());
        let explicit =
            RequestBudget::local(Duration::from_millis(70), shared.profile.current().policy());
        let (got, outside) = ambient.sync_scope(|| shared.budget_for(None));
        assert!(got.ptr_eq(&ambient) && !outside);
        let (got, outside) = ambient.sync_scope(|| shared.budget_for(Some(&explicit)));
        assert!(got.ptr_eq(&explicit) && !outside);
    }

    #[test]
    fn stamps_relative_or_epoch_per_profile() {
        let shared = Shared::new(Profile::default());
        let mut h = HeaderMap::new();
        shared.stamp(&mut h, Duration::from_micros(94_999));
        assert_eq!(h["x-request-timeout-ms"], "94", "rounded down (C2)");

        let epoch = Profile::from_yaml("outbound: {http: epoch-ms}", "inline").unwrap();
        let shared = Shared::new(epoch);
        let mut h = HeaderMap::new();
        let before = SystemClock.now_unix_ms();
        shared.stamp(&mut h, Duration::from_millis(500));
        let stamped: u64 = h["x-request-deadline"].to_str().unwrap().parse().unwrap();
        assert!(stamped >= before + 500 && stamped <= SystemClock.now_unix_ms() + 500);
    }
}
