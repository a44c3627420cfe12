//! A span's outcome from OpenTelemetry's standard attributes alone, for spans that carry no
//! `deadline.outcome` (a fleet that has adopted nothing yet): `rpc.grpc.status_code`
//! (1 CANCELLED, 4 DEADLINE_EXCEEDED), `http.response.status_code` or the older
//! `http.status_code` (499 client closed request, 503 unavailable, 504 gateway timeout), the
//! span status, and an `exception` event (or attribute) whose `exception.type` names a
//! timeout. Together they tell an expired request from a cancelled one, as the contract's
//! outcome table maps them (`docs/contract.md`, "Outcomes on the wire").

/// What the standard attributes say about how a span ended.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StdOutcome {
    /// No status attribute, or nothing that tells.
    #[default]
    Unknown,
    /// A success status (gRPC 0, HTTP below 400, span status OK).
    Ok,
    /// An error that is neither a timeout nor a cancellation.
    Error,
    /// HTTP 503 or gRPC RESOURCE_EXHAUSTED: unavailable (overload, or a hopbudget refusal).
    Unavailable,
    /// DEADLINE_EXCEEDED, 504, or a timeout exception: the time ran out.
    Expired,
    /// CANCELLED or 499: the caller went away.
    Cancelled,
}

impl StdOutcome {
    /// Its name in the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            StdOutcome::Unknown => "unknown",
            StdOutcome::Ok => "ok",
            StdOutcome::Error => "error",
            StdOutcome::Unavailable => "unavailable",
            StdOutcome::Expired => "expired",
            StdOutcome::Cancelled => "cancelled",
        }
    }
}

/// `rpc.grpc.status_code`.
pub(crate) const GRPC_STATUS: &str = "rpc.grpc.status_code";
/// `http.response.status_code` (current semantic conventions).
pub(crate) const HTTP_STATUS: &str = "http.response.status_code";
/// `http.status_code` (older semantic conventions, still what many SDKs write).
pub(crate) const HTTP_STATUS_OLD: &str = "http.status_code";
/// `exception.type`, on a span (it is usually on an `exception` event).
pub(crate) const EXCEPTION_TYPE: &str = "exception.type";

/// The status signals of one span, gathered while its attributes are read.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Signals {
    grpc: Option<i64>,
    http: Option<i64>,
    /// OTLP status code: 0 unset, 1 ok, 2 error.
    span_status: i64,
    timeout_exception: bool,
    any_exception: bool,
}

/// `exception.type` values that name a timeout: Python's `TimeoutError`, `socket.timeout`,
/// `requests.exceptions.ReadTimeout`, Java's `SocketTimeoutException`, .NET's
/// `TaskCanceledException` is not one (cancelled), gRPC's `DeadlineExceeded`, Go's
/// `context.DeadlineExceeded`.
pub(crate) fn names_a_timeout(exception_type: &str) -> bool {
    let t = exception_type.to_ascii_lowercase();
    t.contains("timeout") || t.contains("timedout") || t.contains("deadline")
}

impl Signals {
    /// Note one span attribute (one of the keys above; others are ignored).
    pub(crate) fn attribute(&mut self, key: &str, int: Option<i64>, text: Option<&str>) {
        match key {
            GRPC_STATUS => self.grpc = int,
            HTTP_STATUS => self.http = int.or(self.http),
            HTTP_STATUS_OLD => self.http = self.http.or(int),
            EXCEPTION_TYPE => self.exception(text.unwrap_or("")),
            _ => {}
        }
    }

    /// Note an `exception` event's `exception.type`.
    pub(crate) fn exception(&mut self, exception_type: &str) {
        self.any_exception = true;
        self.timeout_exception |= names_a_timeout(exception_type);
    }

    /// Note the span's status code (0 unset, 1 ok, 2 error).
    pub(crate) fn span_status(&mut self, code: i64) {
        self.span_status = code;
    }

    /// Whether an `exception.type` named a timeout: this side's own timeout fired.
    pub(crate) fn own_timeout(&self) -> bool {
        self.timeout_exception
    }

    /// The outcome: the protocol's own code first, then a timeout exception, then the span
    /// status.
    pub(crate) fn outcome(&self) -> StdOutcome {
        match self.grpc {
            Some(1) => return StdOutcome::Cancelled,
            Some(4) => return StdOutcome::Expired,
            // RESOURCE_EXHAUSTED: shed for overload, gRPC's 503.
            Some(8) => return StdOutcome::Unavailable,
            Some(0) => return StdOutcome::Ok,
            Some(_) => return StdOutcome::Error,
            None => {}
        }
        match self.http {
            Some(499) => return StdOutcome::Cancelled,
            Some(504) => return StdOutcome::Expired,
            Some(503) => return StdOutcome::Unavailable,
            Some(c) if c >= 500 => return StdOutcome::Error,
            _ => {}
        }
        if self.timeout_exception {
            return StdOutcome::Expired;
        }
        if self.span_status == 2 || self.any_exception || self.http.is_some_and(|c| c >= 400) {
            return StdOutcome::Error;
        }
        if self.span_status == 1 || self.http.is_some() {
            return StdOutcome::Ok;
        }
        StdOutcome::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(f: impl FnOnce(&mut Signals)) -> StdOutcome {
        let mut s = Signals::default();
        f(&mut s);
        s.outcome()
    }

    #[test]
    fn expired_and_cancelled_are_told_apart() {
        assert_eq!(
            of(|s| {
                s.attribute("rpc.grpc.status_code", Some(4), None);
            }),
            StdOutcome::Expired
        );
        assert_eq!(
            of(|s| {
                s.attribute("rpc.grpc.status_code", Some(1), None);
            }),
            StdOutcome::Cancelled
        );
        assert_eq!(
            of(|s| {
                s.attribute("http.response.status_code", Some(499), None);
            }),
            StdOutcome::Cancelled
        );
        assert_eq!(
            of(|s| {
                s.attribute("http.status_code", Some(504), None);
            }),
            StdOutcome::Expired
        );
        assert_eq!(
            of(|s| {
                s.attribute("http.status_code", Some(503), None);
            }),
            StdOutcome::Unavailable
        );
        assert_eq!(
            of(|s| {
                s.attribute("rpc.grpc.status_code", Some(8), None);
            }),
            StdOutcome::Unavailable
        );
        assert_eq!(
            of(|s| {
                s.span_status(2);
                s.exception("requests.exceptions.ReadTimeout");
            }),
            StdOutcome::Expired
        );
        assert_eq!(
            of(|s| {
                s.span_status(2);
                s.exception("ValueError");
            }),
            StdOutcome::Error
        );
        assert_eq!(
            of(|s| {
                s.attribute("http.status_code", Some(200), None);
            }),
            StdOutcome::Ok
        );
        assert_eq!(of(|_| {}), StdOutcome::Unknown);
    }
}
