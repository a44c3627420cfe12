//! What differs between the HTTP and the gRPC cases: the carrier the checker sends a budget
//! in, and how each outcome is spelled in the service's answer. The cases themselves are the
//! same on both.

use hopbudget::codec::grpc_timeout::MAX_VALUE;
use hopbudget::codec::{ENVOY_EXPECTED_RQ_TIMEOUT_MS, GRPC_TIMEOUT, REQUEST_TIMEOUT_MS};

use super::caller::Answer;

/// The protocol the service is called with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// HTTP/1.1, the budget in `x-request-timeout-ms`.
    Http,
    /// gRPC over h2c, the budget in `grpc-timeout`.
    Grpc,
}

/// A header the checker sends: name and value.
pub type Header = (&'static str, String);

/// A header as the scorecard shows it.
pub fn shown(headers: &[Header]) -> String {
    headers
        .iter()
        .map(|(n, v)| format!("{n}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

const DEADLINE_EXCEEDED: u32 = 4;
const INVALID_ARGUMENT: u32 = 3;
const RESOURCE_EXHAUSTED: u32 = 8;

impl Wire {
    /// The protocol's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Wire::Http => "HTTP",
            Wire::Grpc => "gRPC",
        }
    }

    /// The carrier the checker sends budgets in.
    pub fn carrier(self) -> &'static str {
        match self {
            Wire::Http => REQUEST_TIMEOUT_MS,
            Wire::Grpc => GRPC_TIMEOUT,
        }
    }

    /// A budget of `ms` milliseconds in the carrier (`grpc-timeout` in milliseconds while
    /// they fit its 8 digits, else in whole seconds).
    pub fn budget(self, ms: u64) -> Header {
        let value = match self {
            Wire::Http => ms.to_string(),
            Wire::Grpc if ms <= MAX_VALUE => format!("{ms}m"),
            Wire::Grpc => format!("{}S", ms / 1000),
        };
        (self.carrier(), value)
    }

    /// A value of the carrier no reader may accept: letters after the digits over HTTP, a
    /// lower-case unit `grpc-timeout` does not have (seconds are `S`) over gRPC.
    pub fn malformed(self) -> Header {
        let value = match self {
            Wire::Http => "12abc",
            Wire::Grpc => "10s",
        };
        (self.carrier(), value.to_owned())
    }

    /// A second carrier that disagrees with the first: Envoy's header, which Envoy sets on
    /// HTTP and gRPC requests alike.
    pub fn second_carrier(self, ms: u64) -> Header {
        (ENVOY_EXPECTED_RQ_TIMEOUT_MS, ms.to_string())
    }

    /// Whether `answer` says the deadline ran out (C4): 504, or DEADLINE_EXCEEDED.
    pub fn is_expired(self, answer: &Answer) -> bool {
        match (self, &answer.grpc) {
            (Wire::Http, _) => answer.status == 504,
            (Wire::Grpc, Some(g)) => g.code == DEADLINE_EXCEEDED,
            (Wire::Grpc, None) => false,
        }
    }

    /// Whether `answer` is a refusal (C3): 503 with `Retry-After`, or DEADLINE_EXCEEDED.
    pub fn is_refusal(self, answer: &Answer) -> bool {
        match self {
            Wire::Http => answer.status == 503 && answer.header("retry-after").is_some(),
            Wire::Grpc => self.is_expired(answer),
        }
    }

    /// Whether `answer` rejects a malformed header (400, or INVALID_ARGUMENT) naming it.
    pub fn is_malformed_answer(self, answer: &Answer) -> bool {
        let code = match (self, &answer.grpc) {
            (Wire::Http, _) => answer.status == 400,
            (Wire::Grpc, Some(g)) => g.code == INVALID_ARGUMENT,
            (Wire::Grpc, None) => false,
        };
        code && self.names_carrier(answer)
    }

    /// Whether `answer` names the carrier, in its body (`grpc-message`) or a header.
    pub fn names_carrier(self, answer: &Answer) -> bool {
        let name = self.carrier();
        answer.body.contains(name) || answer.headers.iter().any(|(_, v)| v.contains(name))
    }

    /// Whether `answer` claims a quota was hit (what C10 forbids at a deadline's end): 429,
    /// or RESOURCE_EXHAUSTED.
    pub fn is_quota(self, answer: &Answer) -> bool {
        match (self, &answer.grpc) {
            (Wire::Http, _) => answer.status == 429,
            (Wire::Grpc, Some(g)) => g.code == RESOURCE_EXHAUSTED,
            (Wire::Grpc, None) => false,
        }
    }

    /// What C4 expects.
    pub fn expects_c4(self) -> &'static str {
        match self {
            Wire::Http => "504 within 10% or 50 ms (whichever is larger) of the deadline",
            Wire::Grpc => {
                "DEADLINE_EXCEEDED within 10% or 50 ms (whichever is larger) of the deadline"
            }
        }
    }

    /// What C10 expects.
    pub fn expects_c10(self) -> &'static str {
        match self {
            Wire::Http => "a deadline's end is never answered 429",
            Wire::Grpc => "a deadline's end is never answered RESOURCE_EXHAUSTED",
        }
    }

    /// What C3 expects.
    pub fn expects_c3(self) -> &'static str {
        match self {
            Wire::Http => "503 with Retry-After, and the downstream is never called",
            Wire::Grpc => "DEADLINE_EXCEEDED, and the downstream is never called",
        }
    }

    /// What the malformed case expects.
    pub fn expects_malformed(self) -> &'static str {
        match self {
            Wire::Http => "400 naming the header, and the downstream is never called",
            Wire::Grpc => "INVALID_ARGUMENT naming the header, and the downstream is never called",
        }
    }

    /// How the downstream answers in C6's two calls, for the scorecard.
    pub fn expired_and_cancelled(self) -> (&'static str, &'static str) {
        match self {
            Wire::Http => (
                "504, x-deadline-outcome: expired",
                "499, x-deadline-outcome: cancelled",
            ),
            Wire::Grpc => (
                "DEADLINE_EXCEEDED, x-deadline-outcome: expired",
                "CANCELLED, x-deadline-outcome: cancelled",
            ),
        }
    }

    /// The wait C5 sees end when the caller leaves.
    pub fn expects_c5(self) -> &'static str {
        match self {
            Wire::Http => "the downstream call is cancelled (its connection closed) within 1 s",
            Wire::Grpc => {
                "the downstream call is cancelled (its stream reset or connection closed) within 1 s"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_budget_fits_eight_digits() {
        assert_eq!(Wire::Grpc.budget(2000), ("grpc-timeout", "2000m".into()));
        assert_eq!(
            Wire::Grpc.budget(1_000_000_000),
            ("grpc-timeout", "1000000S".into())
        );
        assert_eq!(
            Wire::Http.budget(1_000_000_000),
            ("x-request-timeout-ms", "1000000000".into())
        );
    }
}
