//! Compiles the budget's end-state word and its deadline timer's synchronisation on their own,
//! with loom's atomics and locks (see Cargo.toml).

#[cfg(all(loom, test))]
#[allow(dead_code, unreachable_pub)]
#[path = "../../crates/hopbudget/src/budget/state.rs"]
mod state;

#[cfg(all(loom, test))]
#[allow(dead_code, unreachable_pub)]
#[path = "../../crates/hopbudget/src/budget/timer.rs"]
mod timer;
