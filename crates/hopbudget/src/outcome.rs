//! How a hop ended: the four terminal outcomes (rules [C4](crate::contract#c4), [C5](crate::contract#c5), [C10](crate::contract#c10)).
//!
//! See the example on [`Outcome`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// How a hop ended.
///
/// # Examples
///
/// ```
/// use hopbudget::Outcome;
/// use hopbudget::status::{GrpcCode, GrpcStatusMap, HttpStatusMap};
///
/// assert_eq!(Outcome::Expired.as_str(), "expired");
/// let names: Vec<String> = Outcome::ALL.iter().map(|o| o.to_string()).collect();
/// assert_eq!(names, ["completed", "refused", "expired", "cancelled"]);
///
/// // The contract's spelling (a profile may change the codes, never to 429).
/// let http = HttpStatusMap::default();
/// assert_eq!(http.for_outcome(Outcome::Refused), Some(503));
/// assert_eq!(http.for_outcome(Outcome::Completed), None);
/// assert_eq!(http.classify(504), Outcome::Expired); // a downstream 504 is expiry here too
/// assert_eq!(http.classify(500), Outcome::Completed); // an application error, on time
/// let grpc = GrpcStatusMap::default();
/// assert_eq!(grpc.for_outcome(Outcome::Cancelled), Some(GrpcCode::Cancelled));
/// assert_eq!(GrpcCode::DeadlineExceeded.as_i32(), 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The work finished within its budget (whatever the application result was).
    Completed,
    /// The work was not started: the budget was below what it needs (rule [C3](crate::contract#c3)).
    Refused,
    /// The budget reached zero while the work was in flight (rule [C4](crate::contract#c4)).
    Expired,
    /// The caller went away while budget remained (rule [C5](crate::contract#c5)).
    Cancelled,
}

impl Outcome {
    /// All four, for exhaustive reporting.
    ///
    /// See the [example](Outcome#examples).
    pub const ALL: [Outcome; 4] = [
        Outcome::Completed,
        Outcome::Refused,
        Outcome::Expired,
        Outcome::Cancelled,
    ];

    /// The name used in traces (`deadline.outcome`) and metric labels.
    ///
    /// See the [example](Outcome#examples).
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Refused => "refused",
            Outcome::Expired => "expired",
            Outcome::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
