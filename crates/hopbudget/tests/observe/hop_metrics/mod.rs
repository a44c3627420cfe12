//! What a hop records, read from the Prometheus recorder as a dashboard reads it: answers
//! delivered in full over HTTP and gRPC are `completed` (C17, C14), method labels are minted
//! only for real methods, those a descriptor set declares from their first call (C20), and a
//! handler's own `BudgetError` is the hop's outcome (C17).
//!
//! The recorder is the binary's one process-wide recorder (`metrics_support::recorder()`);
//! each test has its own service name, so they run in parallel with each other and with the
//! binary's other tests.

mod grpc_declared;
mod grpc_delivered;
mod handler_errors;
mod http_delivered;
