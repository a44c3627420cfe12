//! Compiles the budget's end-state word on its own, with loom's atomics (see Cargo.toml).

#[cfg(all(loom, test))]
#[allow(dead_code, unreachable_pub)]
#[path = "../../crates/hopbudget/src/budget/state.rs"]
mod state;
