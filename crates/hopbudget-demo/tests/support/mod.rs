//! What the demo's test binaries share (each declares `mod support;` and uses a part): the
//! demo's trace files read back ([`trace_file`]) and the lock that runs one demo at a time
//! ([`serial`]).
#![allow(dead_code, unreachable_pub)]

pub mod serial;
pub mod trace_file;
