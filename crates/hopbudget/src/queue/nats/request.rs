use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::subject::ToSubject;
use async_nats::{Client, HeaderMap, RequestErrorKind};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::codec::marker::{self, Field, Marker};
use crate::codec::{Carrier, Inbound, MalformedHeader};
use crate::hop::{HopConfig, RouteLabel, Verdict};
use crate::observe::Protocol;
use crate::outcome::Outcome;
use crate::queue::HeaderCarrier;
use crate::queue::gate::run_guarded;
use crate::{
    budget::RequestBudget, error::BudgetError, error::EndCause, error::Refused, profile::Profile,
};

/// Core NATS requests carrying the caller's budget, like an outbound HTTP call.
///
/// The forward budget (rule [C2](crate::contract#c2)) travels as relative milliseconds in the profile's relative
/// header (`x-request-timeout-ms`): a request/reply waits for its answer, so skew-immune
/// relative time fits, as over HTTP. The wait is bounded by that same budget, and a budget
/// that cannot cover the hop sends nothing (rule [C3](crate::contract#c3)).
///
/// See the example on [`Responder`] for both sides and each error.
///
/// # Examples
///
/// With a live server (`no_run`):
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use hopbudget::queue::nats::Requester;
/// use hopbudget::Profile;
///
/// let client = async_nats::connect("127.0.0.1:4222").await?;
/// let requester = Requester::new(client, &Profile::default());
/// // Under the ambient request's budget (outside any request, the profile's edge total).
/// let reply = requester.request("tax.quote", "order 42".into()).await?;
/// println!("{:?}", reply.payload);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Requester {
    client: Client,
    header: Arc<str>,
    profile: Profile,
}

/// A request that got no answer to use.
///
/// See the example on [`Responder`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// Refused: by this side before sending ([C3](crate::contract#c3)), or by the responder, which said what it
    /// needed and what it was given.
    #[error("request to `{subject}`: {source}")]
    Budget {
        /// The subject.
        subject: String,
        /// Refused, expired (the budget ran out waiting, or the responder said so) or
        /// cancelled (the caller's budget was cancelled while it waited, or the responder
        /// answered `cancelled`).
        source: BudgetError,
    },
    /// The responder could not read the deadline header (rule [C9](crate::contract#c9)).
    #[error("request to `{subject}` rejected: {detail}")]
    Malformed {
        /// The subject.
        subject: String,
        /// The responder's explanation, naming the header.
        detail: String,
    },
    /// Nobody listens on the subject.
    #[error("no responders on `{subject}`")]
    NoResponders {
        /// The subject.
        subject: String,
    },
    /// Any other client error.
    #[error("request to `{subject}` failed: {source}")]
    Client {
        /// The subject.
        subject: String,
        /// The client's error.
        source: async_nats::RequestError,
    },
}

/// Header on a `malformed` answer: which header and why.
const DETAIL_HEADER: &str = "x-deadline-detail";

impl Requester {
    /// A requester on `client`, with `profile`'s relative header, hop policy and edge total.
    ///
    /// See the [example](Self#examples).
    pub fn new(client: Client, profile: &Profile) -> Self {
        Self {
            client,
            header: profile.spec().headers.relative_ms.as_str().into(),
            profile: profile.clone(),
        }
    }

    /// Send `payload` to `subject` under the ambient budget (outside any request, the
    /// profile's edge total, rule [C8](crate::contract#c8)) and wait for the answer, at most the forward budget.
    ///
    /// See the [example](Self#examples).
    pub async fn request(
        &self,
        subject: impl ToSubject,
        payload: Bytes,
    ) -> Result<async_nats::Message, RequestError> {
        let budget = RequestBudget::current().unwrap_or_else(|| {
            RequestBudget::fallback(self.profile.edge_total(), self.profile.policy())
        });
        self.request_with(&budget, subject, payload).await
    }

    /// Like [`request`](Self::request) under an explicit budget.
    ///
    /// See the example on [`Responder`].
    pub async fn request_with(
        &self,
        budget: &RequestBudget,
        subject: impl ToSubject,
        payload: Bytes,
    ) -> Result<async_nats::Message, RequestError> {
        let subject = subject.to_subject();
        let name = subject.to_string();
        let budget_err = |source| RequestError::Budget {
            subject: name.clone(),
            source,
        };
        let forward = budget.admit_forward().map_err(budget_err)?;
        let mut headers = HeaderMap::new();
        // Relative: a request/reply waits for its answer, so skew-immune time fits.
        let told = Carrier::RelativeMs.encode(forward, || 0);
        headers.insert(&*self.header, told.as_str());
        let request = async_nats::Request::new()
            .headers(headers)
            .payload(payload)
            // Unenforced (C24): the client's own request timeout applies.
            .timeout(budget.is_enforced().then_some(forward));
        // The wait ends with the budget too: a parent cancelled (the caller went away) stops
        // waiting at once, as cancellation, instead of holding on until the timeout (#32).
        let sent = tokio::select! {
            biased;
            cause = budget.done() => return Err(budget_err(cause.into())),
            sent = self.client.send_request(subject, request) => sent,
        };
        let reply = match sent {
            Ok(reply) => reply,
            Err(e) => {
                return Err(match e.kind() {
                    // The wait was bounded by the budget: timing out is expiry (C4).
                    RequestErrorKind::TimedOut => budget_err(BudgetError::Expired),
                    RequestErrorKind::NoResponders => RequestError::NoResponders {
                        subject: name.clone(),
                    },
                    RequestErrorKind::Other => RequestError::Client {
                        subject: name.clone(),
                        source: e,
                    },
                });
            }
        };
        let Some(headers) = &reply.headers else {
            return Ok(reply);
        };
        match marker::read(headers) {
            Some(Marker::Stated(Outcome::Refused)) => Err(budget_err(BudgetError::Refused(
                marker::refusal(headers).unwrap_or(Refused::new(Duration::ZERO, Duration::ZERO)),
            ))),
            Some(Marker::Stated(Outcome::Expired)) => Err(budget_err(BudgetError::Expired)),
            // The responder's budget was cancelled: it answered with nothing, and an empty
            // payload must not pass for a successful reply (C4).
            Some(Marker::Stated(Outcome::Cancelled)) => Err(budget_err(BudgetError::Cancelled)),
            Some(Marker::Malformed) => Err(RequestError::Malformed {
                subject: name.clone(),
                detail: headers
                    .get(DETAIL_HEADER)
                    .map(|v| v.as_str().to_owned())
                    .unwrap_or_default(),
            }),
            _ => Ok(reply),
        }
    }
}

/// Answers core NATS requests inside their caller's budget, refusing before the handler when
/// too little is left (rule [C3](crate::contract#c3)).
///
/// An adapter over the [hop lifecycle](crate::hop), as the HTTP and gRPC servers are.
/// The handler gets the request and returns the answer's payload; it runs inside the
/// budget's scope and a hop span (`hop.protocol = queue`, named after the subject), and is
/// stopped at the deadline (rule [C7](crate::contract#c7)), which answers `expired`. Subjects label metrics: serve
/// fixed subjects, not ones with ids in them ([C20](crate::contract#c20)). Answers the responder makes
/// itself carry `x-deadline-outcome` (`refused` with `x-deadline-required-ms` and
/// `x-deadline-remaining-ms`, `expired`, or `malformed` with `x-deadline-detail`) and an empty
/// payload.
///
/// # Examples
///
/// Both sides on a live server (`no_run`): a quote needs 50 ms, so a caller with 30 ms left is
/// refused before the handler runs.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use hopbudget::queue::nats::{RequestError, Requester, Responder};
/// use hopbudget::status::OUTCOME_METADATA;
/// use hopbudget::{BudgetError, Profile, RequestBudget};
///
/// let profile = Profile::default().with_service("tax");
/// let client = async_nats::connect("127.0.0.1:4222").await?;
///
/// let responder = Responder::new(&profile)
///     .with_min_budget(Duration::from_millis(50))
///     .with_concurrency(16);
/// let server = client.clone();
/// tokio::spawn(async move {
///     responder
///         .serve(server, "tax.quote", |request: async_nats::Message| async move {
///             // Runs inside the caller's budget; echoes the order as the quote.
///             request.payload
///         })
///         .await
/// });
///
/// let requester = Requester::new(client.clone(), &profile);
/// let short = RequestBudget::local(Duration::from_millis(30), profile.policy());
/// match requester.request_with(&short, "tax.quote", "order 42".into()).await {
///     Err(RequestError::Budget { source: BudgetError::Refused(refused), .. }) => {
///         assert_eq!(refused.required(), Duration::from_millis(50));
///     }
///     other => panic!("{other:?}"),
/// }
///
/// // A caller without hopbudget reads the outcome in the answer's headers.
/// let mut headers = async_nats::HeaderMap::new();
/// headers.insert("x-request-timeout-ms", "30");
/// let answer = client
///     .request_with_headers("tax.quote", headers, "order 42".into())
///     .await?;
/// let outcome = answer.headers.as_ref().and_then(|h| h.get(OUTCOME_METADATA));
/// assert_eq!(outcome.map(|v| v.as_str()), Some("refused"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Responder {
    profile: Profile,
    header: Arc<str>,
    min_budget: Duration,
    concurrency: usize,
}

impl Responder {
    /// A responder reading `profile`'s relative header; it refuses below the profile's
    /// `refuse_below_ms`, or the larger [`with_min_budget`](Self::with_min_budget).
    ///
    /// See the [example](Self#examples).
    pub fn new(profile: &Profile) -> Self {
        Self {
            header: profile.spec().headers.relative_ms.as_str().into(),
            min_budget: profile.policy().refuse_below,
            profile: profile.clone(),
            concurrency: 64,
        }
    }

    /// The least budget the handler starts with (its p50 or p99 cost).
    ///
    /// See the [example](Self#examples).
    pub fn with_min_budget(mut self, min: Duration) -> Self {
        self.min_budget = min;
        self
    }

    /// Answer up to `n` requests at once (default 64).
    ///
    /// See the [example](Self#examples).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Subscribe to `subject` and answer until the subscription ends or this future is
    /// dropped.
    ///
    /// See the [example](Self#examples).
    pub async fn serve<H, Fut>(
        &self,
        client: Client,
        subject: impl ToSubject,
        handler: H,
    ) -> Result<(), async_nats::SubscribeError>
    where
        H: Fn(async_nats::Message) -> Fut,
        Fut: Future<Output = Bytes>,
    {
        let subject = subject.to_subject();
        let config = Arc::new(HopConfig::new(self.profile.clone(), Protocol::Queue));
        let subscriber = client.subscribe(subject.clone()).await?;
        subscriber
            .for_each_concurrent(self.concurrency, |request| {
                let (client, config, handler, subject) = (&client, &config, &handler, &subject);
                async move {
                    let Some(reply_to) = request.reply.clone() else {
                        return;
                    };
                    let (headers, payload) = self.answer(config, subject, request, handler).await;
                    if let Err(error) = client
                        .publish_with_headers(reply_to, headers, payload)
                        .await
                    {
                        tracing::warn!(%error, "answering a NATS request failed");
                    }
                }
            })
            .await;
        Ok(())
    }

    /// The hop lifecycle for one request; this adapter only reads the header and spells the
    /// verdict as reply headers.
    async fn answer<H, Fut>(
        &self,
        config: &Arc<HopConfig>,
        subject: &str,
        request: async_nats::Message,
        handler: &H,
    ) -> (HeaderMap, Bytes)
    where
        H: Fn(async_nats::Message) -> Fut,
        Fut: Future<Output = Bytes>,
    {
        let max = self.profile.max();
        let inbound = match request
            .headers
            .as_ref()
            .and_then(|h| HeaderCarrier::get(h, &self.header))
        {
            None => Ok(None),
            Some(value) => Carrier::RelativeMs
                .decode(value, || 0)
                .map(|left| {
                    Some(Inbound {
                        carrier: Carrier::RelativeMs,
                        budget: left.min(max),
                        clamped: left > max,
                    })
                })
                .map_err(|reason| {
                    let name = http::HeaderName::from_bytes(self.header.as_bytes()).unwrap_or(
                        http::HeaderName::from_static(crate::codec::REQUEST_TIMEOUT_MS),
                    );
                    MalformedHeader::new(name, reason)
                }),
        };
        let mut guard = match config.admit_inbound(inbound, RouteLabel::Known(subject)) {
            Verdict::Malformed(malformed) => {
                // C9: a clear error naming the header, never "no deadline".
                let mut headers = outcome(Marker::Malformed);
                headers.insert(DETAIL_HEADER, malformed.to_string());
                return (headers, Bytes::new());
            }
            Verdict::Expired => return (outcome(Marker::Stated(Outcome::Expired)), Bytes::new()),
            Verdict::Refused(refused) => return (refusal(refused), Bytes::new()),
            Verdict::Admitted(guard) => guard,
        };
        let arrived = guard.budget().at_arrival();
        if arrived < self.min_budget {
            let refused = Refused::new(self.min_budget, arrived);
            guard.answered_refused(refused);
            guard.finish();
            return (refusal(refused), Bytes::new());
        }
        match run_guarded(&mut guard, handler(request)).await {
            Ok(payload) => {
                guard.finish();
                (HeaderMap::new(), payload)
            }
            Err(EndCause::Expired) => {
                guard.expired();
                (outcome(Marker::Stated(Outcome::Expired)), Bytes::new())
            }
            Err(EndCause::Cancelled) => {
                guard.finish();
                (outcome(Marker::Stated(Outcome::Cancelled)), Bytes::new())
            }
        }
    }
}

// A NATS message's headers carry the same marker fields as HTTP headers.
impl marker::Fields for HeaderMap {
    fn field(&self, field: Field) -> Option<&[u8]> {
        self.get(field.name()).map(|v| v.as_str().as_bytes())
    }
}

fn refusal(refused: Refused) -> HeaderMap {
    let mut headers = outcome(Marker::Stated(Outcome::Refused));
    headers.insert(
        marker::REQUIRED_MS,
        marker::encode_ms(refused.required()).as_str(),
    );
    headers.insert(
        marker::REMAINING_MS,
        marker::encode_ms(refused.remaining()).as_str(),
    );
    headers
}

fn outcome(marker: Marker) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(marker::OUTCOME, marker.as_str());
    headers
}
