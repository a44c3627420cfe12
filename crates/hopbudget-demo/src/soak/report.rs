//! The soak's report: the per-hop ledger, what the client saw, memory, and every check with
//! the figures behind it.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::chain::Chain;
use super::drain::Drain;
use super::ledger::End;
use super::load::Load;
use super::memory::{Memory, memory_flat, mib};
use super::mix::Kind;
use super::options::SoakOptions;
use super::overload::{CAPACITY_SLOTS, CAPACITY_WORK, OVERLOAD_BUDGET_MS, capacity_per_s};

/// One check and whether it held.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// The figures behind it.
    pub detail: String,
}

/// The result of a soak run.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// The report as text.
    pub text: String,
    /// Every check.
    pub checks: Vec<Check>,
}

impl SoakReport {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

/// The report of one run; its checks decide the exit status.
pub(super) fn report(
    opts: &SoakOptions,
    chain: &Chain,
    load: &Load,
    drain: &Drain,
    memory: &Memory,
) -> SoakReport {
    let mut text = String::new();
    let mut checks = Vec::new();
    heading(&mut text, opts, load);
    ledgers(&mut text, &mut checks, chain, drain);
    arrivals(&mut checks, chain, load);
    client_view(&mut text, load);
    leftovers(&mut checks, chain, drain);
    memory_use(&mut text, &mut checks, opts, load, memory);
    if opts.overload.is_some() {
        overload(&mut text, chain, load);
    }
    let _ = writeln!(text, "\nchecks:");
    for c in &checks {
        let _ = writeln!(
            text,
            "  [{}] {}: {}",
            if c.ok { "ok" } else { "FAIL" },
            c.name,
            c.detail
        );
    }
    SoakReport { text, checks }
}

/// What ran: the chain, the load, how long.
fn heading(text: &mut String, opts: &SoakOptions, load: &Load) {
    let mode = match opts.overload {
        Some(f) => format!(
            "overload {f}x: {:.0} req/s offered to a leaf of capacity {:.0} req/s ({} slots x {} ms), budget {} ms",
            opts.rate,
            capacity_per_s(),
            CAPACITY_SLOTS,
            CAPACITY_WORK.as_millis(),
            OVERLOAD_BUDGET_MS
        ),
        None => format!(
            "mix at {:.0} req/s (good 60%, short/expiring/cancelled/malformed 10% each)",
            opts.rate
        ),
    };
    let _ = writeln!(
        text,
        "hopbudget soak: edge -> mid -> leaf on loopback, {mode}, {:.0} s of load, {} requests",
        load.secs, load.sent
    );
    let _ = writeln!(text);
}

/// Each hop's ledger, and the check that it lost nothing.
fn ledgers(text: &mut String, checks: &mut Vec<Check>, chain: &Chain, drain: &Drain) {
    let _ = writeln!(
        text,
        "{:<6} {:>9} {:>10} {:>9} {:>9} {:>10} {:>10} {:>6} {:>10}",
        "hop",
        "arrived",
        "completed",
        "refused",
        "expired",
        "cancelled",
        "malformed",
        "other",
        "in flight"
    );
    for hop in chain.hops() {
        let l = &hop.ledger;
        let _ = writeln!(
            text,
            "{:<6} {:>9} {:>10} {:>9} {:>9} {:>10} {:>10} {:>6} {:>10}",
            hop.name,
            l.arrived.load(Ordering::SeqCst),
            l.ended(End::Completed),
            l.ended(End::Refused),
            l.ended(End::Expired),
            l.ended(End::Cancelled),
            l.ended(End::Malformed),
            l.ended(End::Other),
            l.in_flight.load(Ordering::SeqCst),
        );
        let arrived = l.arrived.load(Ordering::SeqCst);
        checks.push(Check {
            name: format!("{}: nothing lost", hop.name),
            ok: arrived == l.total_ended() && l.ended(End::Other) == 0 && drain.idle,
            detail: format!(
                "arrived {arrived} = completed + refused + expired + cancelled + malformed = {} (other {}, in flight {})",
                l.total_ended() - l.ended(End::Other),
                l.ended(End::Other),
                l.in_flight.load(Ordering::SeqCst)
            ),
        });
    }
}

/// A request the client abandons (C5) may be gone before the edge accepts it; every other
/// request must arrive.
fn arrivals(checks: &mut Vec<Check>, chain: &Chain, load: &Load) {
    let edge_arrived = chain.edge.ledger.arrived.load(Ordering::SeqCst);
    let (sent, abandoned) = (load.sent, load.abandoned());
    checks.push(Check {
        name: "edge: every request sent arrived, or was abandoned by its client".into(),
        ok: edge_arrived <= sent && sent - edge_arrived <= abandoned,
        detail: format!("sent {sent}, arrived {edge_arrived}, abandoned by the client {abandoned}"),
    });
}

/// What the client saw, per kind of request.
fn client_view(text: &mut String, load: &Load) {
    let _ = writeln!(text);
    let _ = writeln!(text, "client view, per kind (status: count):");
    for (kind, tally) in Kind::ALL.iter().zip(load.tallies.iter()) {
        let sent = tally.sent.load(Ordering::SeqCst);
        if sent == 0 {
            continue;
        }
        let seen = tally
            .by_status
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = writeln!(text, "  {:<9} sent {sent:>8}  {seen}", kind.name());
    }
}

/// Nothing left running: the live tasks came back, and no hop future (deadline timer) is
/// alive.
fn leftovers(checks: &mut Vec<Check>, chain: &Chain, drain: &Drain) {
    checks.push(Check {
        name: "live tokio tasks back to baseline".into(),
        ok: drain.tasks_back,
        detail: format!(
            "before the load {}, after the drain {}",
            drain.tasks_before, drain.tasks_after
        ),
    });
    let futures_alive: u64 = chain
        .hops()
        .iter()
        .map(|h| h.ledger.in_flight.load(Ordering::SeqCst))
        .sum();
    checks.push(Check {
        name: "no hop future (deadline timer) left".into(),
        ok: futures_alive == 0,
        detail: format!("{futures_alive} alive"),
    });
}

/// Memory flat after the warm-up, and what it was at the start, at its peak and at the end.
fn memory_use(
    text: &mut String,
    checks: &mut Vec<Check>,
    opts: &SoakOptions,
    load: &Load,
    memory: &Memory,
) {
    let (ok, detail) = memory_flat(
        &memory.samples,
        opts.warmup.as_secs_f64(),
        load.secs,
        load.sent as f64 / load.secs.max(1e-9),
    );
    checks.push(Check {
        name: "resident memory flat after warm-up".into(),
        ok,
        detail,
    });
    let peak = memory
        .samples
        .iter()
        .map(|s| s.1)
        .max()
        .unwrap_or(memory.end);
    let _ = writeln!(
        text,
        "\nresident memory: {:.1} MiB at start, {:.1} MiB peak, {:.1} MiB at the end",
        mib(memory.start),
        mib(peak),
        mib(memory.end)
    );
}

/// Overload mode: goodput against capacity, refusals, expiries, and the admitted p99.
fn overload(text: &mut String, chain: &Chain, load: &Load) {
    let edge = &chain.edge.ledger;
    let completed = edge.ended(End::Completed) as f64;
    let refused = edge.ended(End::Refused) as f64;
    let expired = edge.ended(End::Expired) as f64;
    let goodput = completed / load.secs;
    let p99 = match load.admitted.lock() {
        Ok(a) if !a.is_empty() => {
            format!("{:.0} ms", a.value_at_quantile(0.99) as f64 / 1e3)
        }
        _ => "-".to_owned(),
    };
    let _ = writeln!(
        text,
        "overload: goodput {goodput:.1} req/s = {:.0}% of capacity; refused {:.1}/s, expired {:.1}/s; admitted p99 {p99} (budget {OVERLOAD_BUDGET_MS} ms)",
        100.0 * goodput / capacity_per_s(),
        refused / load.secs,
        expired / load.secs
    );
}
