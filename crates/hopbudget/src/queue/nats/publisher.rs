use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishAckFuture};
use async_nats::subject::ToSubject;
use bytes::Bytes;

use crate::queue::{Stamp, Stamper};
use crate::{BudgetError, Profile};

/// Publishes JetStream messages stamped with the current request's deadline.
///
/// See the [module docs](super) for an example.
#[derive(Clone, Debug)]
pub struct Publisher {
    js: jetstream::Context,
    stamper: Stamper,
}

/// A message that was not published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The budget could not cover the hop (rule C3), or had ended: nothing was sent.
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

impl Publisher {
    /// A publisher on `js`, stamping with `profile`'s queue headers and hop policy.
    pub fn new(js: jetstream::Context, profile: &Profile) -> Self {
        Self::with_stamper(js, Stamper::new(profile))
    }

    /// A publisher with a stamper of your own (a skewed or manual clock in tests).
    pub fn with_stamper(js: jetstream::Context, stamper: Stamper) -> Self {
        Self { js, stamper }
    }

    /// Publish `payload` to `subject` and wait for the stream to store it.
    pub async fn publish(
        &self,
        subject: impl ToSubject,
        payload: Bytes,
    ) -> Result<Stamp, PublishError> {
        self.publish_with_headers(subject, HeaderMap::new(), payload)
            .await
    }

    /// Publish with headers of your own; the deadline headers are added to them.
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
