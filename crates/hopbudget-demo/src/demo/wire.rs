//! The names on the demo's wire: the header carrying the request id, the path each protocol
//! serves, and which of them a service serves.

use super::topology::{Protocol, ServiceSpec};

/// The header (and gRPC metadata key) carrying the client's request id.
pub const REQUEST_ID: &str = "x-demo-request-id";
/// The gRPC method path every gRPC service serves.
pub const GRPC_PATH: &str = "/hopbudget.demo.Hop/Call";
/// The HTTP path every HTTP service serves.
pub const HTTP_PATH: &str = "/call";

/// The route a service serves: its gRPC method or its HTTP path.
pub fn route_of(spec: &ServiceSpec) -> &'static str {
    match spec.protocol {
        Protocol::Grpc => GRPC_PATH,
        Protocol::Http => HTTP_PATH,
    }
}
