//! Which answers prove that a called method exists, so that it may earn its own metric label
//! ([C20](crate::contract#c20)). A request's path is anyone's to choose; the service's answer is not.
//!
//! tonic's router answers a method no service implements at once, with a trailers-only
//! UNIMPLEMENTED (`grpc-status: 12` in the headers). A method is proved by a message sent
//! for it, or by any status but UNIMPLEMENTED, in the headers of a trailers-only answer or
//! in the trailers. An answer that is no gRPC answer (an HTTP status other than 200) proves
//! nothing.

use http::{HeaderMap, StatusCode};

use crate::status::GrpcCode;

/// What an answer's headers (or trailers) say about the method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Proof {
    /// A status other than UNIMPLEMENTED: the method exists.
    Proved,
    /// UNIMPLEMENTED, or no gRPC answer at all: the method earns no label.
    Refuted,
    /// No status yet: messages and trailers follow.
    Open,
}

/// What the response head with `status` and `headers` proves.
pub(super) fn of_head(status: StatusCode, headers: &HeaderMap) -> Proof {
    if status != StatusCode::OK {
        return Proof::Refuted;
    }
    of_status(headers)
}

/// What a `grpc-status` in `headers` (a trailers-only head, or the trailers) proves.
pub(super) fn of_status(headers: &HeaderMap) -> Proof {
    let Some(value) = headers.get("grpc-status") else {
        return Proof::Open;
    };
    let code = std::str::from_utf8(value.as_bytes())
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok());
    match code {
        Some(code) if code != GrpcCode::Unimplemented.as_i32() => Proof::Proved,
        _ => Proof::Refuted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(status: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("grpc-status", status.parse().unwrap());
        h
    }

    #[test]
    fn only_a_status_other_than_unimplemented_proves_a_method() {
        assert_eq!(of_head(StatusCode::OK, &headers("12")), Proof::Refuted);
        assert_eq!(of_head(StatusCode::OK, &headers("5")), Proof::Proved);
        assert_eq!(of_head(StatusCode::OK, &HeaderMap::new()), Proof::Open);
        assert_eq!(
            of_head(StatusCode::NOT_FOUND, &HeaderMap::new()),
            Proof::Refuted
        );
        assert_eq!(of_status(&headers("0")), Proof::Proved);
        assert_eq!(of_status(&headers("twelve")), Proof::Refuted);
    }
}
