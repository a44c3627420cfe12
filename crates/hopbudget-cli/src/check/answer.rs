//! What a call to the service under test came back with: its answer (an HTTP/1.1 one, or a
//! gRPC one with its status), or why there was none to judge. Both callers make these
//! ([`super::caller`] for HTTP/1.1, [`super::grpc_caller`] for gRPC), and the cases judge
//! them.

use std::fmt;
use std::time::Duration;

/// A gRPC answer's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcStatus {
    /// `grpc-status`.
    pub code: u32,
    /// `grpc-message`, percent-decoded.
    pub message: String,
}

/// The name gRPC gives a status code.
pub fn grpc_code_name(code: u32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        _ => "another code",
    }
}

/// The service's answer to one request.
#[derive(Clone, Debug)]
pub struct Answer {
    /// The HTTP status code.
    pub status: u16,
    /// Headers (and a gRPC answer's trailers), names lower-case.
    pub headers: Vec<(String, String)>,
    /// The body as text (chunk framing left in: it is searched, not parsed); a gRPC answer's
    /// `grpc-message`.
    pub body: String,
    /// From the request written to the answer's head read (a gRPC answer's status).
    pub elapsed: Duration,
    /// A gRPC answer's status.
    pub grpc: Option<GrpcStatus>,
}

impl Answer {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body's first line, shortened, for a scorecard's observation.
    pub fn gist(&self) -> String {
        let line = self
            .body
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let mut gist: String = line.chars().take(80).collect();
        if gist.len() < line.len() {
            gist.push_str("...");
        }
        gist
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.grpc {
            Some(g) => write!(
                f,
                "{} {} after {} ms",
                g.code,
                grpc_code_name(g.code),
                self.elapsed.as_millis()
            ),
            None => write!(f, "{} after {} ms", self.status, self.elapsed.as_millis()),
        }
    }
}

/// Why a request got no answer to judge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The connection was refused or failed.
    Unreachable(String),
    /// Bytes came back, but not an HTTP/1.1 answer (with `--grpc`: not a gRPC answer).
    NotHttp(String),
    /// No answer within the patience given.
    NoAnswer(Duration),
    /// The service reset the call's HTTP/2 stream instead of answering (with `--grpc`).
    Reset(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Unreachable(e) => write!(f, "cannot connect: {e}"),
            CallError::NotHttp(start) => write!(f, "the answer is not understood: {start:?}"),
            CallError::NoAnswer(p) => write!(f, "no answer within {} ms", p.as_millis()),
            CallError::Reset(reason) => write!(f, "the service reset the stream ({reason})"),
        }
    }
}
