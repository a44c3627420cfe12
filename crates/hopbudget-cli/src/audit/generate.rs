//! A generator of synthetic OTLP JSON traces of the S7 checkout graph, for measuring the
//! audit at scale (`hopbudget gen-traces`, a hidden development command).
//!
//! Traces are written the way a batching exporter writes them: requests overlap, spans are
//! emitted in batches of 512 in the order they end (children before their caller, one trace
//! spread over several lines), each batch one `ExportTraceServiceRequest` line with a
//! `resourceSpans` entry per service. With `forgetful` set, that service ignores the inbound
//! deadline and starts its own 2 s budget (S13), and its slow calls below end at exactly 2 s.

use std::io::{self, Write};

use hopbudget::observe::fields;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The hops of the S7 graph: name, protocol, caller index, p50 work (ms), least budget to
/// start (ms).
const HOPS: [(&str, &str, Option<usize>, u64, i64); 8] = [
    ("edge-gateway", "http", None, 2, 10),
    ("checkout-orchestrator", "grpc", Some(0), 15, 20),
    ("cart-svc", "grpc", Some(1), 20, 20),
    ("pricing", "grpc", Some(1), 25, 25),
    ("tax-calc", "grpc", Some(3), 10, 20),
    ("inventory", "grpc", Some(1), 15, 20),
    ("warehouse-router", "grpc", Some(5), 10, 20),
    ("reco-scorer", "grpc", Some(6), 5, 40),
];

const ENTRY_BUDGET_MS: i64 = 500;
const MARGIN_MS: i64 = 5;
const FORGETFUL_DEFAULT_MS: i64 = 2_000;
const BATCH: usize = 512;
const CONCURRENT: u64 = 64;

struct Gen {
    spans: Vec<(u64, usize, String)>,
    rng: StdRng,
    forgetful: Option<usize>,
}

impl Gen {
    /// Generate hop `i` of trace `t`, arriving at `start` (ns) with `remaining` ms (`None`
    /// for a forgetful hop); returns when it ended (ns).
    fn hop(&mut self, t: u64, i: usize, start: u64, remaining: i64, parent: u64) -> u64 {
        let (name, protocol, _, p50, min_budget) = HOPS[i];
        let forgetful = self.forgetful == Some(i);
        let (remaining, source) = if forgetful {
            (FORGETFUL_DEFAULT_MS, "local")
        } else if i == 0 {
            (remaining, "relative-ms")
        } else if protocol == "grpc" {
            (remaining, "grpc-timeout")
        } else {
            (remaining, "relative-ms")
        };
        let id = (t << 4) | (i as u64 + 1);
        let ms = 1_000_000u64;
        let deadline = start + remaining.max(0) as u64 * ms;
        let mut attrs = vec![
            int(fields::REMAINING_MS, remaining),
            string(fields::SOURCE, source),
            int(fields::MARGIN_MS, MARGIN_MS),
        ];
        let (end, outcome) = if remaining < min_budget {
            attrs.push(int(fields::REQUIRED_MS, min_budget));
            (start + 50_000, "refused")
        } else {
            // Log-normal-ish work with a slow path on one request in ten.
            let slow = self.rng.random::<f64>() < 0.1;
            let work = if slow {
                p50 as f64 * 40.0 + self.rng.random::<f64>() * 3_000.0
            } else {
                p50 as f64 * (0.6 + self.rng.random::<f64>())
            };
            let work_end = start + (work * ms as f64) as u64;
            // Calls start part-way through the hop's own work, with jitter as in life.
            let call_at = start + (work.min(p50 as f64 * 2.0) * 0.5 * ms as f64) as u64;
            let mut end = work_end;
            for child in (0..HOPS.len()).filter(|&c| HOPS[c].2 == Some(i)) {
                let spent = ((call_at - start) / ms) as i64;
                let child_end = self.hop(
                    t,
                    child,
                    call_at + 200_000,
                    remaining - spent - MARGIN_MS,
                    id,
                );
                end = end.max(child_end + 100_000);
            }
            if end > deadline {
                if work_end > deadline {
                    attrs.push(int(fields::OVERRUN_MS, ((work_end - deadline) / ms) as i64));
                }
                (deadline + 300_000, "expired")
            } else {
                (end, "completed")
            }
        };
        attrs.push(string(fields::OUTCOME, outcome));
        let parent = if parent == 0 {
            String::new()
        } else {
            format!("{parent:016x}")
        };
        let json = format!(
            r#"{{"traceId":"{:032x}","spanId":"{id:016x}","parentSpanId":"{parent}","name":"{name} {protocol}","kind":2,"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":[{}],"status":{{}}}}"#,
            0x6865_6e00_0000_0000_0000_0000_0000_0000u128 | u128::from(t),
            attrs.join(",")
        );
        self.spans.push((end, i, json));
        end
    }
}

fn int(key: &str, v: i64) -> String {
    format!(r#"{{"key":"{key}","value":{{"intValue":"{v}"}}}}"#)
}

fn string(key: &str, v: &str) -> String {
    format!(r#"{{"key":"{key}","value":{{"stringValue":"{v}"}}}}"#)
}

/// Write at least `spans` spans (whole traces of 8 hops) to `out`; returns how many spans
/// were written. `forgetful` names a service of the graph that ignores inbound deadlines.
///
/// # Errors
/// Writing failed, or `forgetful` is not a service of the graph.
pub fn write(
    out: &mut dyn Write,
    spans: u64,
    forgetful: Option<&str>,
    seed: u64,
) -> io::Result<u64> {
    let forgetful = match forgetful {
        None => None,
        Some(name) => Some(HOPS.iter().position(|h| h.0 == name).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "--forgetful {name}: no such service (services: {})",
                    HOPS.map(|h| h.0).join(", ")
                ),
            )
        })?),
    };
    let mut g = Gen {
        spans: Vec::new(),
        rng: StdRng::seed_from_u64(seed),
        forgetful,
    };
    let traces = spans.div_ceil(HOPS.len() as u64);
    let base = 1_765_000_000_000_000_000u64;
    let mut written = 0u64;
    let mut t = 1u64;
    while t <= traces {
        let group_end = (t + CONCURRENT).min(traces + 1);
        for trace in t..group_end {
            // 40 requests a second.
            g.hop(trace, 0, base + trace * 25_000_000, ENTRY_BUDGET_MS, 0);
        }
        t = group_end;
        g.spans.sort_by_key(|s| s.0);
        for batch in g.spans.chunks(BATCH) {
            write_batch(out, batch)?;
            written += batch.len() as u64;
        }
        g.spans.clear();
    }
    Ok(written)
}

fn write_batch(out: &mut dyn Write, batch: &[(u64, usize, String)]) -> io::Result<()> {
    out.write_all(br#"{"resourceSpans":["#)?;
    let mut first = true;
    for (svc, (name, ..)) in HOPS.iter().enumerate() {
        let mut spans = batch.iter().filter(|s| s.1 == svc).peekable();
        if spans.peek().is_none() {
            continue;
        }
        if !first {
            out.write_all(b",")?;
        }
        first = false;
        write!(
            out,
            r#"{{"resource":{{"attributes":[{}]}},"scopeSpans":[{{"scope":{{"name":"hopbudget"}},"spans":["#,
            string(fields::SERVICE, name)
        )?;
        for (k, s) in spans.enumerate() {
            if k > 0 {
                out.write_all(b",")?;
            }
            out.write_all(s.2.as_bytes())?;
        }
        out.write_all(b"]}]}")?;
    }
    out.write_all(b"]}\n")
}
