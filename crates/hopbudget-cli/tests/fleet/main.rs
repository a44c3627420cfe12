//! `hopbudget proxy` and `hopbudget check` with peers in other languages (Go, Python, Node,
//! Java), built or installed by `scripts/test-all`: services behind the proxy, the guides'
//! recipes, the demo's checkout graph, the fleet trial, and the checks of the interop
//! services. One test binary, a module per fleet; without a peer a test says so and passes,
//! unless `HOPBUDGET_REQUIRE_SERVICES=1`.

#[path = "../support/mod.rs"]
mod support;

mod check_interop;
mod checkout;
mod go;
mod polyglot;
mod recipes;
mod trial;
