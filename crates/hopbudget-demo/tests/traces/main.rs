//! The demo's traces and its metrics, from the library's own export. A test binary of its
//! own: `span_export` installs the process's global metrics recorder and counts what every
//! demo run in the process records there, so no other demo may run in its process.

#[path = "../support/mod.rs"]
mod support;

mod span_export;
