//! The publishers' `PublishError`s convert as [`BudgetError`](crate::BudgetError) does (#33):
//! a handler that publishes returns the error with `?`, from an axum handler or a tonic
//! service, and the caller gets the contract's answer for a deadline outcome (504, 503 with
//! `Retry-After: 0`, 499; DEADLINE_EXCEEDED, UNAVAILABLE, CANCELLED), while a broker failure
//! is what a failed downstream is: 502 Bad Gateway over HTTP, UNAVAILABLE over gRPC. Both go
//! through [`DownstreamError`](crate::DownstreamError), so a shim spells them once.

/// `budget_error`, `From<$ty> for DownstreamError`, `From<$ty> for tonic::Status` (feature
/// `grpc`) and `IntoResponse` (feature `axum`) for a publisher's error enum with `Budget { source:
/// BudgetError, .. }` and `Broker { .. }` variants.
macro_rules! publish_error_conversions {
    ($ty:ty) => {
        impl $ty {
            /// The deadline outcome that kept the message from being published, if that is
            /// why (rule [C3](crate::contract#c3): refused, or the budget had ended).
            ///
            /// See the [example](Self#examples).
            pub fn budget_error(&self) -> Option<&$crate::error::BudgetError> {
                match self {
                    Self::Budget { source, .. } => Some(source),
                    _ => None,
                }
            }
        }

        impl From<$ty> for $crate::DownstreamError {
            /// A deadline outcome stays one; a broker failure is a failed downstream call.
            fn from(e: $ty) -> Self {
                match e.budget_error() {
                    Some(budget) => $crate::downstream::DownstreamError::from(*budget),
                    None => $crate::downstream::DownstreamError::from(
                        Box::new(e) as Box<dyn std::error::Error + Send + Sync>
                    ),
                }
            }
        }

        #[cfg(feature = "grpc")]
        impl From<$ty> for tonic::Status {
            /// A deadline outcome as `From<BudgetError>` spells it; a broker failure as
            /// UNAVAILABLE with its message.
            fn from(e: $ty) -> Self {
                tonic::Status::from($crate::downstream::DownstreamError::from(e))
            }
        }

        #[cfg(feature = "axum")]
        impl axum::response::IntoResponse for $ty {
            /// A deadline outcome as `BudgetError`'s response; a broker failure as 502 Bad
            /// Gateway with its message.
            fn into_response(self) -> axum::response::Response {
                $crate::downstream::DownstreamError::from(self).into_response()
            }
        }
    };
}

pub(crate) use publish_error_conversions;
