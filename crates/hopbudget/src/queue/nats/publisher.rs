use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishAckFuture};
use async_nats::subject::ToSubject;
use bytes::Bytes;

use crate::queue::{Stamp, Stamper};
use crate::{error::BudgetError, profile::Profile};

/// Publishes JetStream messages stamped with the current request's deadline.
///
/// See the [module example](super#examples) for a producer and a consumer on a live server.
///
/// # Examples
///
/// A publish the budget cannot cover sends nothing (rule [C3](crate::contract#c3)), so this one needs no server:
/// the client connects in the background and is never used.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use async_nats::jetstream;
/// use hopbudget::queue::nats::{PublishError, Publisher};
/// use hopbudget::{BudgetError, Profile, RequestBudget};
///
/// let profile = Profile::default();
/// let client = async_nats::ConnectOptions::new()
///     .retry_on_initial_connect()
///     .connect("127.0.0.1:4222")
///     .await?;
/// let publisher = Publisher::new(jetstream::new(client), &profile);
///
/// // 3 ms left cannot cover the hop's margin and the profile's refuse threshold.
/// let request = RequestBudget::local(Duration::from_millis(3), profile.policy());
/// match request.scope(publisher.publish("orders.charge", "order 42".into())).await {
///     Err(PublishError::Budget { subject, source: BudgetError::Refused(_) }) => {
///         assert_eq!(subject, "orders.charge");
///     }
///     other => panic!("{other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
///
/// With a live server (`no_run`): headers of your own, a stamper of your own, and many
/// publishes in flight.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use async_nats::{HeaderMap, jetstream};
/// use hopbudget::queue::nats::Publisher;
/// use hopbudget::queue::Stamper;
/// use hopbudget::Profile;
///
/// let profile = Profile::default().with_service("checkout");
/// let client = async_nats::connect("127.0.0.1:4222").await?;
/// let publisher = Publisher::with_stamper(jetstream::new(client), Stamper::new(&profile));
///
/// // The deadline headers are added to the message's own.
/// let mut headers = HeaderMap::new();
/// headers.insert("order-id", "42");
/// let stamp = publisher
///     .publish_with_headers("orders.charge", headers, "order 42".into())
///     .await?;
/// println!("deadline {} ms after the epoch", stamp.deadline_epoch_ms);
///
/// // Many in flight: send them all, then wait for the stream to store each.
/// let mut stored = Vec::new();
/// for order in 0..100 {
///     let (_stamp, ack) = publisher
///         .send("orders.charge", HeaderMap::new(), format!("order {order}").into())
///         .await?;
///     stored.push(ack);
/// }
/// for ack in stored {
///     ack.await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Publisher {
    js: jetstream::Context,
    stamper: Stamper,
}

/// A message that was not published.
///
/// See the [example](Publisher#examples).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The budget could not cover the hop (rule [C3](crate::contract#c3)), or had ended: nothing was sent.
    #[error("message to `{subject}` not published: {source}")]
    Budget {
        /// The subject.
        subject: String,
        /// Why.
        source: BudgetError,
    },
    /// The broker did not take the message (or did not confirm it).
    #[error("publishing to `{subject}` failed: {source}")]
    Broker {
        /// The subject.
        subject: String,
        /// The client's error.
        source: async_nats::jetstream::context::PublishError,
    },
}

crate::queue::publish_error::publish_error_conversions!(PublishError);

impl Publisher {
    /// A publisher on `js`, stamping with `profile`'s queue headers and hop policy.
    ///
    /// See the [example](Self#examples).
    pub fn new(js: jetstream::Context, profile: &Profile) -> Self {
        Self::with_stamper(js, Stamper::new(profile))
    }

    /// A publisher with a stamper of your own (a skewed or manual clock in tests).
    ///
    /// See the [example](Self#examples).
    pub fn with_stamper(js: jetstream::Context, stamper: Stamper) -> Self {
        Self { js, stamper }
    }

    /// Publish `payload` to `subject` and wait for the stream to store it.
    ///
    /// See the [example](Self#examples).
    pub async fn publish(
        &self,
        subject: impl ToSubject,
        payload: Bytes,
    ) -> Result<Stamp, PublishError> {
        self.publish_with_headers(subject, HeaderMap::new(), payload)
            .await
    }

    /// Publish with headers of your own; the deadline headers are added to them.
    ///
    /// See the [example](Self#examples).
    pub async fn publish_with_headers(
        &self,
        subject: impl ToSubject,
        headers: HeaderMap,
        payload: Bytes,
    ) -> Result<Stamp, PublishError> {
        let subject = subject.to_subject();
        let (stamp, ack) = self.send(subject.clone(), headers, payload).await?;
        ack.await.map_err(|source| PublishError::Broker {
            subject: subject.to_string(),
            source,
        })?;
        Ok(stamp)
    }

    /// Send without waiting for the stream's acknowledgement: returns the stamp and the
    /// acknowledgement future, so a producer can have many publishes in flight.
    ///
    /// See the [example](Self#examples).
    pub async fn send(
        &self,
        subject: impl ToSubject,
        mut headers: HeaderMap,
        payload: Bytes,
    ) -> Result<(Stamp, PublishAckFuture), PublishError> {
        let subject = subject.to_subject();
        let stamp = self
            .stamper
            .stamp(&mut headers)
            .map_err(|source| PublishError::Budget {
                subject: subject.to_string(),
                source,
            })?;
        let ack = self
            .js
            .publish_with_headers(subject.clone(), headers, payload)
            .await
            .map_err(|source| PublishError::Broker {
                subject: subject.to_string(),
                source,
            })?;
        Ok((stamp, ack))
    }
}
