use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::{OwnedHeaders, ToBytes};
use rdkafka::producer::future_producer::Delivery;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::queue::{Stamp, Stamper};
use crate::{error::BudgetError, profile::Profile};

/// Produces Kafka records stamped with the current request's deadline.
///
/// See the [module example](super#examples) for a producer and a consumer on a live broker.
///
/// # Examples
///
/// A record the budget cannot cover is never queued (rule [C3](crate::contract#c3)), so this one needs no broker:
/// librdkafka connects only when a record is produced.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use rdkafka::ClientConfig;
/// use rdkafka::message::OwnedHeaders;
/// use rdkafka::producer::FutureProducer;
/// use hopbudget::queue::kafka::{Producer, PublishError};
/// use hopbudget::queue::Stamper;
/// use hopbudget::{BudgetError, Profile, RequestBudget};
///
/// let profile = Profile::default();
/// let kafka: FutureProducer = ClientConfig::new()
///     .set("bootstrap.servers", "127.0.0.1:19092")
///     .create()?;
/// let producer = Producer::new(kafka.clone(), &profile);
/// // Or with a stamper of your own:
/// let _same = Producer::with_stamper(kafka, Stamper::new(&profile));
///
/// // 3 ms left cannot cover the hop's margin and the profile's refuse threshold.
/// let request = RequestBudget::local(Duration::from_millis(3), profile.policy());
/// let sent = request
///     .scope(producer.send("orders", Some("42"), "order 42", OwnedHeaders::new()))
///     .await;
/// match sent {
///     Err(PublishError::Budget { topic, source: BudgetError::Refused(_) }) => {
///         assert_eq!(topic, "orders");
///     }
///     other => panic!("{other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Producer {
    producer: FutureProducer,
    stamper: Stamper,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("stamper", &self.stamper)
            .finish_non_exhaustive()
    }
}

/// A record that was not produced.
///
/// See the [example](Producer#examples).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The budget could not cover the hop (rule [C3](crate::contract#c3)), or had ended: nothing was queued.
    #[error("record to `{topic}` not produced: {source}")]
    Budget {
        /// The topic.
        topic: String,
        /// Why.
        source: BudgetError,
    },
    /// The broker did not take the record.
    #[error("producing to `{topic}` failed: {source}")]
    Broker {
        /// The topic.
        topic: String,
        /// The client's error.
        source: KafkaError,
    },
}

crate::queue::publish_error::publish_error_conversions!(PublishError);

impl Producer {
    /// A producer on `producer`, stamping with `profile`'s queue headers and hop policy.
    ///
    /// See the [example](Self#examples).
    pub fn new(producer: FutureProducer, profile: &Profile) -> Self {
        Self::with_stamper(producer, Stamper::new(profile))
    }

    /// A producer with a stamper of your own (a skewed or manual clock in tests).
    ///
    /// See the [example](Self#examples).
    pub fn with_stamper(producer: FutureProducer, stamper: Stamper) -> Self {
        Self { producer, stamper }
    }

    /// Stamp `headers` and produce the record, waiting for its delivery (queueing waits at
    /// most five seconds when librdkafka's queue is full).
    ///
    /// See the [example](Self#examples).
    pub async fn send<K, P>(
        &self,
        topic: &str,
        key: Option<&K>,
        payload: &P,
        mut headers: OwnedHeaders,
    ) -> Result<(Stamp, Delivery), PublishError>
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        let stamp = self
            .stamper
            .stamp(&mut headers)
            .map_err(|source| PublishError::Budget {
                topic: topic.to_owned(),
                source,
            })?;
        let mut record = FutureRecord::to(topic).payload(payload).headers(headers);
        if let Some(key) = key {
            record = record.key(key);
        }
        let delivery = self
            .producer
            .send(record, Duration::from_secs(5))
            .await
            .map_err(|(source, _)| PublishError::Broker {
                topic: topic.to_owned(),
                source,
            })?;
        Ok((stamp, delivery))
    }
}
