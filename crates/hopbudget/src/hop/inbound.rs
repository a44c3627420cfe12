//! The inbound verdict: from a request's carriers to a [`Verdict`] (malformed, expired,
//! refused before work, or admitted with its [`HopGuard`]), before any handler runs. This is
//! the hop's own refuse-before-start ([C3](crate::contract#c3)), not deadline-aware
//! admission under overload ([C21](crate::contract#c21)), which is [`crate::admission`].
//!
//! One file on purpose, over 500 lines: the verdict is one decision, from carriers to `Verdict`,
//! with its unit tests.

#[cfg(feature = "grpc")]
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use http::HeaderMap;

use super::guard::HopGuard;
use super::record::{Hop, Would};
use crate::clock::{SystemClock, WallClock};
use crate::codec::{Inbound, MalformedHeader, read_inbound};
use crate::error::Refused;
use crate::observe;
use crate::observe::labels::{
    HopLabels, HopRoute, LayerMetrics, MethodSet, OTHER_ROUTE, Protocol, RouteLabel, is_method_path,
};
use crate::profile::{RouteMode, RouteRule};
use crate::{budget::RequestBudget, profile::Profile, profile::shared::SharedProfile};

/// Everything a server hop reads on every request: the profile, the service name, the wall
/// clock used to convert epoch carriers, and the bounded set of route labels. One per layer,
/// shared by every clone of the service and every request.
///
/// The profile is a [`SharedProfile`]: each request reads the one in force when it arrives
/// (rule [C24](crate::contract#c24)).
///
/// See the [example](super#example-a-custom-protocol-adapter).
pub struct HopConfig {
    profile: SharedProfile,
    service: Arc<str>,
    protocol: Protocol,
    wall_clock: Arc<dyn WallClock>,
    methods: MethodSet,
    metrics: LayerMetrics,
}

impl fmt::Debug for HopConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HopConfig")
            .field("service", &self.service)
            .field("protocol", &self.protocol)
            .field("wall_clock", &self.wall_clock)
            .finish_non_exhaustive()
    }
}

/// The verdict on an arriving request. Only `Admitted` runs any work.
///
/// See the [example](super#example-a-custom-protocol-adapter).
#[derive(Debug)]
pub enum Verdict {
    /// A deadline header could not be read: a client error naming the header ([C9](crate::contract#c9)). Counted.
    Malformed(MalformedHeader),
    /// The budget was zero on arrival: already expired ([C9](crate::contract#c9)). The hop is recorded.
    Expired,
    /// Less budget than the route needs: refused before work ([C3](crate::contract#c3)). The hop is recorded.
    Refused(Refused),
    /// Go ahead: the guard owns the budget and the hop until the answer is complete.
    Admitted(HopGuard),
}

impl HopConfig {
    /// A hop configuration for `protocol` that follows `profile` (a [`Profile`], or a
    /// [`SharedProfile`] to replace at run time), reading epoch carriers with the machine's
    /// wall clock.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn new(profile: impl Into<SharedProfile>, protocol: Protocol) -> Self {
        let profile = profile.into();
        let service = Arc::from(profile.current().service());
        Self {
            metrics: LayerMetrics::new(&service),
            service,
            profile,
            protocol,
            wall_clock: Arc::new(SystemClock),
            methods: MethodSet::default(),
        }
    }

    /// Read epoch carriers with `clock` instead of the machine's wall clock: a host whose
    /// clock is skewed ([S3](crate::contract#s3)) or stepped ([S5](crate::contract#s5)), in tests and demos.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn with_wall_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.wall_clock = clock;
        self
    }

    /// Label calls to `declared` gRPC methods from their first call, whatever their answer
    /// ([C20](crate::contract#c20)): the methods a server's descriptor set names. Added to any
    /// declared before.
    #[cfg(feature = "grpc")]
    pub(crate) fn with_declared_methods(
        mut self,
        declared: impl IntoIterator<Item = Arc<str>>,
    ) -> Self {
        let mut all = HashSet::clone(self.methods.declared());
        all.extend(declared);
        self.methods = MethodSet::with_declared(Arc::new(all));
        self
    }

    /// A configuration like this one (profile, protocol, wall clock, declared methods) with
    /// none of its methods learned yet: for a builder whose configuration is already shared.
    pub(crate) fn rebuilt(&self) -> Self {
        Self {
            metrics: LayerMetrics::new(&self.service),
            service: self.service.clone(),
            profile: self.profile.clone(),
            protocol: self.protocol,
            wall_clock: self.wall_clock.clone(),
            #[cfg(feature = "grpc")]
            methods: MethodSet::with_declared(self.methods.declared().clone()),
            // Only a gRPC server declares methods: without it there are none to keep.
            #[cfg(not(feature = "grpc"))]
            methods: MethodSet::default(),
        }
    }

    /// The profile in force now.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    #[inline]
    pub fn profile(&self) -> Arc<Profile> {
        self.profile.current()
    }

    /// The handle this configuration reads its profile from: replace the profile, or turn
    /// enforcement off, through it (rule [C24](crate::contract#c24)).
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn shared_profile(&self) -> &SharedProfile {
        &self.profile
    }

    /// The service name, as labels want it.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn service(&self) -> &Arc<str> {
        &self.service
    }

    /// The protocol this configuration serves.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The bounded label for a route ([C20](crate::contract#c20)).
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn route_label(&self, route: RouteLabel<'_>) -> String {
        let profile = self.profile.current();
        let label = match route {
            RouteLabel::Matched { pattern, .. } | RouteLabel::Known(pattern) => pattern,
            RouteLabel::Path(path) => profile
                .route(path)
                .map_or(OTHER_ROUTE, |rule| rule.pattern()),
            RouteLabel::Method(method) => match profile.route(method) {
                Some(rule) => rule.pattern(),
                None => self.methods.known(method).unwrap_or(OTHER_ROUTE),
            },
        };
        label.to_owned()
    }

    /// The service answered `method` as a method it has ([C20](crate::contract#c20)): from now on it is its own
    /// label, while the cap leaves room. What the guard of a call to a method not yet known
    /// is told by its adapter ([`HopGuard::method_answered`]).
    pub(crate) fn learn_method(&self, method: &str) -> Option<Arc<str>> {
        self.methods.learn(method)
    }

    /// Decide on a request from its deadline headers and its route.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    #[inline]
    pub fn admit(self: &Arc<Self>, headers: &HeaderMap, route: RouteLabel<'_>) -> Verdict {
        self.admit_in(&self.profile.current(), headers, route)
    }

    /// [`admit`](Self::admit) under `profile`, which the adapter read from
    /// [`profile`](Self::profile) once for the whole request (its status codes too).
    #[inline]
    pub(crate) fn admit_in(
        self: &Arc<Self>,
        profile: &Profile,
        headers: &HeaderMap,
        route: RouteLabel<'_>,
    ) -> Verdict {
        let inbound = read_inbound(headers, profile.inbound(), profile.max(), &*self.wall_clock);
        self.admit_with(profile, Some(headers), inbound, route)
    }

    /// Decide on a request whose carriers were already read (a queue message's headers, a
    /// protocol with its own carrier format).
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn admit_inbound(
        self: &Arc<Self>,
        inbound: Result<Option<Inbound>, MalformedHeader>,
        route: RouteLabel<'_>,
    ) -> Verdict {
        let profile = self.profile.current();
        self.admit_with(&profile, None, inbound, route)
    }

    /// `headers`, when the request has them, also carry the caller's trace context.
    fn admit_with(
        self: &Arc<Self>,
        profile: &Profile,
        headers: Option<&HeaderMap>,
        inbound: Result<Option<Inbound>, MalformedHeader>,
        route: RouteLabel<'_>,
    ) -> Verdict {
        let (rule, label, unproved) = self.rule_and_label(profile, route);
        let policy = profile.policy();
        let budget = match inbound {
            Err(malformed) => {
                let labels = HopLabels::for_route(&self.service, label, self.protocol)
                    .with_low_budget(profile.low_budget());
                observe::malformed_header(&labels, malformed.header().as_str());
                if policy.enforce {
                    return Verdict::Malformed(malformed);
                }
                // Unenforced (C24): counted, and the request runs on the edge total, as one
                // with no deadline would; the hop records what enforcement would have done.
                let budget = RequestBudget::fallback(profile.edge_total(), policy);
                return self.admit_rooted(
                    profile,
                    headers,
                    budget,
                    rule,
                    label,
                    unproved,
                    Some(Would::Malformed),
                );
            }
            Ok(Some(inbound)) => {
                if inbound.clamped {
                    tracing::debug!(
                        carrier = inbound.carrier.name(),
                        max_ms = profile.max().as_millis() as u64,
                        "inbound budget clamped to the profile maximum"
                    );
                }
                RequestBudget::from_carrier(inbound.carrier, inbound.budget, policy)
            }
            // One clock read roots the budget and gives its arrival value: the hop reports
            // the edge total exactly (#32).
            Ok(None) => {
                observe::notice_missing(
                    &self.service,
                    label,
                    profile.edge_total(),
                    profile.spec().log.notices_per_s,
                );
                RequestBudget::fallback(profile.edge_total(), policy)
            }
        };
        self.admit_rooted(profile, headers, budget, rule, label, unproved, None)
    }

    /// Decide on a budget the adapter already holds: a queue message tried again under the
    /// budget it was first admitted with (rule [C6](crate::contract#c6): a retry spends what is left, never a fresh
    /// budget). A hop of its own is opened and recorded, as for a new arrival.
    pub(crate) fn admit_budget(
        self: &Arc<Self>,
        budget: RequestBudget,
        route: RouteLabel<'_>,
    ) -> Verdict {
        let profile = self.profile.current();
        let (rule, label, unproved) = self.rule_and_label(&profile, route);
        self.admit_rooted(&profile, None, budget, rule, label, unproved, None)
    }

    /// Record a hop the adapter turns away before any work, with what is left of `budget`:
    /// `refused` naming `required` (rule [C3](crate::contract#c3)), or `expired` when `required` is `None` (the
    /// budget is marked expired, [C4](crate::contract#c4)). For verdicts only the adapter can reach: a queue message
    /// inside the skew allowance, a retry left with too little to try again.
    pub(crate) fn turn_away(
        &self,
        budget: &RequestBudget,
        route: RouteLabel<'_>,
        required: Option<std::time::Duration>,
    ) {
        let profile = self.profile.current();
        let (_, label, _) = self.rule_and_label(&profile, route);
        let hop = Hop::open(
            HopRoute::new(
                &self.metrics,
                &self.service,
                label,
                self.protocol,
                profile.low_budget(),
            ),
            budget,
        );
        match required {
            Some(required) => hop.refuse(required),
            None => {
                budget.expire();
                hop.finish(crate::outcome::Outcome::Expired);
            }
        }
    }

    /// The profile rule for a route and its bounded label, from one scan of the routes.
    /// The route's rule and its bounded label ([C20](crate::contract#c20)), and the method path of a gRPC method
    /// no rule names and no answer has proved yet: labelled `other` for now, its hop takes
    /// the method's label if the service answers it as a method it has.
    fn rule_and_label<'a>(
        &'a self,
        profile: &'a Profile,
        route: RouteLabel<'a>,
    ) -> (Option<&'a RouteRule>, &'a str, Option<&'a str>) {
        // The rule is looked up by the concrete path too: a profile names paths, a router
        // names patterns.
        let rule = match route {
            RouteLabel::Matched { pattern, path } => {
                profile.route(pattern).or_else(|| profile.route(path))
            }
            RouteLabel::Path(p) | RouteLabel::Method(p) | RouteLabel::Known(p) => profile.route(p),
        };
        let mut unproved = None;
        let label = match route {
            RouteLabel::Matched { pattern, .. } | RouteLabel::Known(pattern) => pattern,
            RouteLabel::Path(_) => rule.map_or(OTHER_ROUTE, RouteRule::pattern),
            RouteLabel::Method(method) => match rule {
                Some(rule) => rule.pattern(),
                None => self.methods.known(method).unwrap_or_else(|| {
                    unproved = is_method_path(method).then_some(method);
                    OTHER_ROUTE
                }),
            },
        };
        (rule, label, unproved)
    }

    /// Open the hop for `budget` and decide: expired at zero, refused below the route's
    /// threshold, else admitted. Unenforced ([C24](crate::contract#c24)), every request is admitted, and its hop
    /// records what enforcement would have done (`would`, already known for a malformed
    /// header).
    #[allow(clippy::too_many_arguments)]
    fn admit_rooted(
        self: &Arc<Self>,
        profile: &Profile,
        headers: Option<&HeaderMap>,
        budget: RequestBudget,
        rule: Option<&RouteRule>,
        label: &str,
        unproved: Option<&str>,
        mut would: Option<Would>,
    ) -> Verdict {
        let policy = profile.policy();
        let enforce = budget.is_enforced();
        let route = HopRoute::new(
            &self.metrics,
            &self.service,
            label,
            self.protocol,
            profile.low_budget(),
        )
        .with_line(profile.spec().log.hops);
        // An unproved method's arrival is counted when its label is settled, at its end.
        let mut hop = if unproved.is_some() {
            Hop::open_unlabelled(route, &budget)
        } else {
            Hop::open(route, &budget)
        };
        // The hop span is the child of the caller's span across the wire (feature `otel`).
        if let Some(headers) = headers {
            observe::follow_remote_parent(hop.span(), headers);
            hop.name_trace(headers);
        }
        // The budget was made a moment ago from this very value: no second clock read.
        let arrived = budget.at_arrival();
        if arrived.is_zero() {
            if enforce {
                // C9: zero or negative budgets are already expired.
                budget.expire();
                hop.finish(crate::outcome::Outcome::Expired);
                return Verdict::Expired;
            }
            would = would.or(Some(Would::Expired));
        }
        // A learning route refuses below max(static, learned) (C3). The budget was made from
        // one clock read a moment ago; its deadline minus its arrival value is that instant.
        let min = match rule {
            None => policy.refuse_below,
            Some(rule) => match budget.deadline().instant().checked_sub(arrived) {
                Some(now) => rule.threshold_at(now),
                None => rule.threshold(),
            },
        };
        if arrived < min && would.is_none() {
            observe::notice_refused(
                &self.service,
                label,
                min,
                arrived,
                profile.spec().log.notices_per_s,
                enforce,
            );
            if enforce {
                hop.refuse(min);
                return Verdict::Refused(Refused::new(min, arrived));
            }
            would = Some(Would::Refused(min));
        }
        if let Some(would) = would {
            hop.unenforced(would);
        }
        let stream_lifetime = rule
            .is_some_and(|r| r.mode == RouteMode::Stream)
            .then(|| profile.stream_lifetime());
        let budget = if stream_lifetime.is_some() {
            budget.for_stream()
        } else {
            budget
        };
        Verdict::Admitted(
            HopGuard::new(budget, hop, stream_lifetime)
                .learning(rule.and_then(RouteRule::learned_shared))
                .unproved_method(unproved),
        )
    }
}

/// The prefix of hopbudget's own answer markers (`x-deadline-outcome`,
/// `x-deadline-required-ms`, `x-deadline-remaining-ms`).
const MARKER_PREFIX: &str = "x-deadline-";

/// Remove hopbudget's internal markers from an inbound request (rule [C19](crate::contract#c19)): they are only
/// ever written on answers, so one arriving on a request was forged or leaked from outside,
/// and a handler or a client layer below must not mistake it for a real outcome. One pass
/// over the names, and nothing else unless one is there.
///
/// ```
/// use hopbudget::hop::strip_internal_markers;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-deadline-outcome", "refused".parse().unwrap()); // forged by a client
/// headers.insert("x-request-timeout-ms", "300".parse().unwrap());
/// strip_internal_markers(&mut headers);
/// assert!(!headers.contains_key("x-deadline-outcome"));
/// assert_eq!(headers["x-request-timeout-ms"], "300");
/// ```
#[inline]
pub fn strip_internal_markers(headers: &mut HeaderMap) {
    if headers
        .keys()
        .any(|name| name.as_str().starts_with(MARKER_PREFIX))
    {
        strip_forged(headers);
    }
}

/// The rare half of [`strip_internal_markers`], out of line so the common check inlines.
#[cold]
#[inline(never)]
fn strip_forged(headers: &mut HeaderMap) {
    let forged: Vec<_> = headers
        .keys()
        .filter(|name| name.as_str().starts_with(MARKER_PREFIX))
        .cloned()
        .collect();
    for name in forged {
        tracing::debug!(
            header = name.as_str(),
            "internal deadline marker stripped from a request"
        );
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forged_markers_are_stripped_and_nothing_else() {
        let mut headers = HeaderMap::new();
        headers.insert("x-deadline-outcome", "refused".parse().unwrap());
        headers.insert("x-deadline-required-ms", "1".parse().unwrap());
        headers.insert("x-request-timeout-ms", "300".parse().unwrap());
        strip_internal_markers(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key("x-request-timeout-ms"));
    }

    #[test]
    fn config_and_guard_cross_threads() {
        fn is<T: Send + Sync>() {}
        is::<HopConfig>();
        is::<HopGuard>();
    }
}
