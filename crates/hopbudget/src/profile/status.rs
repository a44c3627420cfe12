//! The `status:` section: how terminal statuses are spelled on the wire (rule
//! [C10](crate::contract#c10)).

use serde::{Deserialize, Serialize};

use super::issues::Issues;
use crate::status::{GrpcCode, GrpcStatusMap, HttpStatusMap};

/// Status mapping.
///
/// See the [example](crate::Profile#examples).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatusSpec {
    /// HTTP status codes.
    pub http: HttpStatusMap,
    /// gRPC status codes.
    pub grpc: GrpcStatusMap,
}

impl StatusSpec {
    /// Error statuses only; expiry and refusal never spelled as quota; expiry, refusal and
    /// cancellation told apart (rules [C4](crate::contract#c4), [C5](crate::contract#c5),
    /// [C10](crate::contract#c10)).
    pub(super) fn check(&self, issues: &mut Issues) {
        let http = &self.http;
        for (field, code) in [
            ("status.http.refused", http.refused),
            ("status.http.expired", http.expired),
            ("status.http.cancelled", http.cancelled),
            ("status.http.malformed", http.malformed),
        ] {
            if !(400..=599).contains(&code) {
                issues.push(
                    field,
                    format!("{code} is not an HTTP error status (400-599)"),
                );
            }
        }
        for (field, code) in [
            ("status.http.refused", http.refused),
            ("status.http.expired", http.expired),
            ("status.http.cancelled", http.cancelled),
        ] {
            if code == 429 {
                issues.push(field, "429 means quota, not time (rule C10)".into());
            }
        }
        if http.expired == http.cancelled {
            issues.push(
                "status.http.cancelled",
                "must differ from `expired`: expiry is not cancellation (rules C4, C5)".into(),
            );
        }
        if http.refused == http.cancelled {
            issues.push(
                "status.http.refused",
                "must differ from `cancelled` (rule C10)".into(),
            );
        }
        let grpc = &self.grpc;
        for (field, code) in [
            ("status.grpc.refused", grpc.refused),
            ("status.grpc.expired", grpc.expired),
            ("status.grpc.cancelled", grpc.cancelled),
            ("status.grpc.malformed", grpc.malformed),
        ] {
            if code == GrpcCode::ResourceExhausted {
                issues.push(
                    field,
                    "RESOURCE_EXHAUSTED means quota, not time (rule C10)".into(),
                );
            }
            if code == GrpcCode::Ok {
                issues.push(field, "OK is not an error status".into());
            }
        }
        if grpc.expired == grpc.cancelled {
            issues.push(
                "status.grpc.cancelled",
                "must differ from `expired`: expiry is not cancellation (rules C4, C5)".into(),
            );
        }
    }
}
