//! `hopbudget audit FILE…`: find where a chain of hops loses its deadline, from the traces an
//! operator already collects.
//!
//! It reads OTLP JSON traces ([`input`]: the demo's `traces-<mode>.otlp.jsonl`,
//! `hopbudget::observe::otlp`'s files, an OpenTelemetry Collector's `file` exporter output,
//! plain or gzip; or, with `--listen`, OTLP/HTTP export requests, protobuf or JSON, from an
//! SDK's or a Collector's exporter: [`listen`]; with `--kafka`, the records a Collector's Kafka
//! exporter writes), groups spans into traces as they stream past
//! ([`group`]), rebuilds each request's hop tree from the hop spans' `deadline.*` attributes (C14) and audits it
//! ([`analyze`]), then reports per hop ([`report`]): budget resets (a chain break, S13),
//! missing deadlines (C8), latency spikes at one exact value (a default timeout firing), late
//! work, refusals by depth ("entry budget too small for this chain depth", S6) and, for epoch
//! carriers, the clock offset between services (S3). On plain OpenTelemetry spans it finds,
//! from span kinds, parent ids and timing alone ([`timing`]), server work that went on after
//! its caller or the request had ended, duration spikes on client and server spans and the
//! chain depth; and reads outcomes from the standard status attributes ([`status`]) and
//! budget resets and drops from the deadline headers instrumentation captured
//! ([`header_reset`]); and maps the rollout per service ([`rollout`]).
//! Output is a table, JSON or an HTML page
//! ([`render`]). The exit status is 1 when a chain break is found (from hop attributes or
//! deadline headers) that added at least 100 ms in at least 5% of the calls (a smaller or
//! rarer reset is a warning; [`AuditOptions::reset_error_ms`]), so it can gate CI; 4 when
//! there was nothing to judge (no spans, or none with anything to judge: the report says
//! why), 3 when no chain break was found but some input could not be read, 2 on a usage
//! error, else 0.
//!
//! Memory is bounded and documented: the longest line read (`--max-line-bytes`), the spans of
//! open traces (`--max-open-spans`, about 100 bytes each) and per-hop counters (bounded by the
//! number of distinct hops, capped). Every trace is audited on its own, so the analysis shards
//! by trace id: run one `hopbudget audit --json` per shard where the spans already are (or N
//! `--kafka` consumers in one group: the `kafka` module, feature `kafka`), and merge the reports
//! exactly with `--merge` ([`merge`]).

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

pub mod analyze;
mod calls;
pub mod command;
mod fired;
pub mod generate;
pub mod group;
pub mod header_reset;
mod histogram;
pub mod input;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod listen;
pub mod merge;
pub mod page;
pub mod render;
pub mod report;
pub mod rollout;
mod serde_as;
pub mod span;
pub mod status;
pub mod timing;
pub mod told;

pub use report::{Finding, FindingKind, Forwards, Report, RolloutRow, Severity};

/// One thing that could not be read: the file, the line (1-based) and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Problem {
    /// The file (`-` for standard input).
    pub file: String,
    /// The line, when the problem is in one.
    pub line: Option<u64>,
    /// Why it could not be read.
    pub reason: String,
    /// What kind of problem: the reason without its particulars, so that repeated problems
    /// are grouped (see [`ProblemKind`]).
    pub kind: String,
}

impl Problem {
    pub(crate) fn new(file: &str, line: Option<u64>, reason: String) -> Self {
        Self {
            file: file.to_owned(),
            line,
            kind: kind_of(&reason),
            reason,
        }
    }
}

/// The kind of a problem: `span skipped: <field>` for a span, else the reason up to its
/// first colon (which is where the particulars start).
fn kind_of(reason: &str) -> String {
    let span = reason
        .strip_prefix("span ")
        .and_then(|r| r.split_once(": "))
        .filter(|(n, _)| n.bytes().all(|b| b.is_ascii_digit()));
    match span {
        Some((_, rest)) => {
            let field = rest.split([':', ';']).next().unwrap_or(rest);
            format!("span skipped: {field}")
        }
        None => reason.split(':').next().unwrap_or(reason).trim().to_owned(),
    }
}

/// Problems of one kind: how many, and the first few in full.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ProblemKind {
    /// The kind ([`Problem::kind`]).
    pub kind: String,
    /// How many problems of this kind.
    pub count: u64,
    /// The first ones (at most three).
    pub examples: Vec<Problem>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}", self.file, self.reason),
            None => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

/// Problems, the first `cap` kept in full and the rest counted; and grouped by kind, each
/// with a count and its first three (at most `cap` kinds; past it they count as `other`).
#[derive(Clone, Debug)]
pub(crate) struct Problems {
    pub(crate) shown: Vec<Problem>,
    pub(crate) total: u64,
    pub(crate) kinds: Vec<ProblemKind>,
    cap: usize,
}

impl Problems {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            shown: Vec::new(),
            total: 0,
            kinds: Vec::new(),
            cap,
        }
    }

    pub(crate) fn push(&mut self, p: Problem) {
        self.total += 1;
        let kind = if self.kinds.len() < self.cap || self.kinds.iter().any(|k| k.kind == p.kind) {
            p.kind.clone()
        } else {
            "other".to_owned()
        };
        match self.kinds.iter_mut().find(|k| k.kind == kind) {
            Some(k) => {
                k.count += 1;
                if k.examples.len() < 3 {
                    k.examples.push(p.clone());
                }
            }
            None => self.kinds.push(ProblemKind {
                kind,
                count: 1,
                examples: vec![p.clone()],
            }),
        }
        if self.shown.len() < self.cap {
            self.shown.push(p);
        }
    }
}

/// Settings of one audit; [`AuditOptions::default`] gives the documented defaults.
#[derive(Clone, Debug)]
pub struct AuditOptions {
    /// A hop may start with this much more than its caller had left before it counts as a
    /// reset (absorbs millisecond rounding). Default 2 ms.
    pub tolerance_ms: i64,
    /// Work that ended at most this long after the client span that called it, after the
    /// request's root span, or after its deadline (`deadline.overrun_ms`) is not late work:
    /// a healthy request winds down 10-30 ms after its answer on a loaded host. Default 50 ms.
    pub late_tolerance_ms: i64,
    /// A trace is finished once its root arrived and this many spans of other traces have
    /// been read since its last span. Default 20,000.
    pub settle_spans: u64,
    /// At most this many spans are held in open traces; past it the least recently active
    /// trace is finished early. Default 250,000 (about 25 MiB).
    pub max_open_spans: usize,
    /// Lines longer than this are reported and skipped. Default 64 MiB.
    pub max_line_bytes: usize,
    /// Problems listed in full (the rest are counted). Default 50.
    pub max_problems: usize,
    /// Least spans in a latency spike. Default 5.
    pub spike_min: u64,
    /// Least hops at a depth for the S6 finding. Default 10.
    pub depth_min: u64,
    /// A budget reset is an error (exit status 1) when the median budget it added is at
    /// least this (ms) and it happened in at least [`reset_error_percent`](Self::reset_error_percent)
    /// of the calls; a smaller or rarer one is a warning. Default 100 ms.
    pub reset_error_ms: u64,
    /// See [`reset_error_ms`](Self::reset_error_ms). Default 5 (%).
    pub reset_error_percent: f64,
    /// Work for nobody is an error (exit status 1) when a service's server spans went on
    /// after their caller's client span had ended in at least
    /// [`nobody_error_percent`](Self::nobody_error_percent) of its calls, by a median of at
    /// least this (ms) over those calls; otherwise a warning. Default 100 ms.
    pub nobody_error_ms: u64,
    /// See [`nobody_error_ms`](Self::nobody_error_ms). Default 5 (%).
    pub nobody_error_percent: f64,
}

impl Default for AuditOptions {
    fn default() -> Self {
        Self {
            tolerance_ms: 2,
            late_tolerance_ms: 50,
            settle_spans: 20_000,
            max_open_spans: 250_000,
            max_line_bytes: 64 << 20,
            max_problems: 50,
            spike_min: 5,
            depth_min: 10,
            reset_error_ms: 100,
            reset_error_percent: 5.0,
            nobody_error_ms: 100,
            nobody_error_percent: 5.0,
        }
    }
}

/// The reader's sink: spans go to the grouper, finished traces to the analysis.
struct Auditor {
    names: span::Interner,
    grouper: group::Grouper,
    acc: analyze::Accumulated,
}

impl input::SpanSink for Auditor {
    fn names(&mut self) -> &mut span::Interner {
        &mut self.names
    }

    fn span(&mut self, span: span::Span) {
        let Self {
            names,
            grouper,
            acc,
        } = self;
        grouper.push(span, &mut |spans, how| acc.trace(&spans, how, names));
    }

    fn line_end(&mut self) {
        let Self {
            names,
            grouper,
            acc,
        } = self;
        grouper.line_end(&mut |spans, how| acc.trace(&spans, how, names));
    }
}

/// Distinct names (services, span names, sources) kept; past it they count together.
pub(crate) const NAMES_CAP: usize = 10_000;

/// The finding thresholds of `opts`.
pub(crate) fn rules(opts: &AuditOptions) -> report::findings::FindingRules {
    report::findings::FindingRules {
        spike_min: opts.spike_min,
        depth_min: opts.depth_min,
        resets: report::reset_severity::ResetThresholds {
            error_ms: opts.reset_error_ms,
            error_percent: opts.reset_error_percent,
        },
        nobody: report::reset_severity::ResetThresholds {
            error_ms: opts.nobody_error_ms,
            error_percent: opts.nobody_error_percent,
        },
    }
}

/// One audit in progress: feed it inputs, then [`finish`](Self::finish) it.
struct Session {
    auditor: Auditor,
    stats: input::InputStats,
    problems: Problems,
    limits: input::ReadLimits,
    rules: report::findings::FindingRules,
}

impl Session {
    fn new(opts: &AuditOptions) -> Self {
        Self {
            auditor: Auditor {
                names: span::Interner::new(NAMES_CAP),
                grouper: group::Grouper::new(group::GroupLimits {
                    settle: opts.settle_spans,
                    max_open_spans: opts.max_open_spans,
                }),
                acc: analyze::Accumulated::new(analyze::AnalyzeSettings {
                    tolerance_ms: opts.tolerance_ms,
                    late_tolerance_ms: opts.late_tolerance_ms,
                    max_hops: 10_000,
                }),
            },
            stats: input::InputStats::default(),
            problems: Problems::new(opts.max_problems),
            limits: input::ReadLimits {
                max_line_bytes: opts.max_line_bytes,
            },
            rules: rules(opts),
        }
    }

    /// One OTLP/HTTP export request's body: its spans go where a file's line's go. Returns
    /// how many of its spans were skipped and why (the first reason), or `Err` when the body
    /// is not a trace request at all.
    fn request(
        &mut self,
        body: &[u8],
        encoding: input::Encoding,
        number: u64,
    ) -> Result<(u64, Option<String>), String> {
        self.record(body, encoding, "POST /v1/traces", number)
    }

    /// One export request from anywhere (`label` and `number` name it in problems): see
    /// [`request`](Self::request).
    fn record(
        &mut self,
        body: &[u8],
        encoding: input::Encoding,
        label: &str,
        number: u64,
    ) -> Result<(u64, Option<String>), String> {
        let (bad_before, shown_before) = (self.stats.bad_spans, self.problems.shown.len());
        input::read_request(
            body,
            encoding,
            label,
            number,
            &mut self.auditor,
            &mut self.stats,
            &mut self.problems,
        )?;
        let rejected = self.stats.bad_spans - bad_before;
        let why = self
            .problems
            .shown
            .get(shown_before)
            .map(|p| p.reason.clone());
        Ok((rejected, why.filter(|_| rejected > 0)))
    }

    /// A record that could not be read at all.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    fn problem(&mut self, label: &str, number: u64, reason: String) {
        self.stats.requests += 1;
        self.stats.lines += 1;
        self.stats.bad_lines += 1;
        self.problems
            .push(Problem::new(label, Some(number), reason));
    }

    /// Read with `read` on this thread, decode on [`input::batch::DECODERS`] others and
    /// group and audit on one more, lines handed over in batches of about `batch_bytes`
    /// ([`input::batch`]).
    fn pipelined(&mut self, batch_bytes: usize, read: &mut dyn FnMut(&mut dyn input::LineSink)) {
        use std::sync::mpsc::sync_channel;
        let in_flight = input::batch::InFlight::new(input::batch::IN_FLIGHT_BYTES);
        let files = std::thread::scope(|scope| {
            let mut line_txs = Vec::new();
            let mut decoded_rxs = Vec::new();
            for _ in 0..input::batch::DECODERS {
                let (line_tx, line_rx) = sync_channel(input::batch::IN_FLIGHT);
                let (decoded_tx, decoded_rx) = sync_channel(input::batch::IN_FLIGHT);
                scope.spawn(move || input::batch::decode(line_rx, decoded_tx));
                line_txs.push(line_tx);
                decoded_rxs.push(decoded_rx);
            }
            let session = &mut *self;
            let in_flight = &in_flight;
            let auditing = scope.spawn(move || {
                // However this thread ends, the reading thread must not wait for it.
                struct Close<'a>(&'a input::batch::InFlight);
                impl Drop for Close<'_> {
                    fn drop(&mut self) {
                        self.0.close();
                    }
                }
                let _close = Close(in_flight);
                // Batches were dealt in turn: take them back in turn, until the one whose
                // turn it is has no more.
                for turn in 0.. {
                    let Ok(batch) = decoded_rxs[turn % decoded_rxs.len()].recv() else {
                        break;
                    };
                    let bytes = batch.text_bytes;
                    session.absorb(batch);
                    in_flight.give(bytes);
                }
            });
            let mut batcher = input::batch::Batcher::new(line_txs, batch_bytes, in_flight);
            read(&mut batcher);
            let files = batcher.finish();
            if let Err(panic) = auditing.join() {
                std::panic::resume_unwind(panic);
            }
            files
        });
        self.stats.files += files;
    }

    /// One batch from a decoding thread, taken in input order.
    fn absorb(&mut self, mut batch: input::batch::DecodedBatch) {
        batch.adopt_names(&mut self.auditor.names);
        self.stats.add(&batch.stats);
        for p in batch.problems {
            self.problems.push(p);
        }
        for event in batch.events {
            match event {
                input::batch::Event::Span(span) => input::SpanSink::span(&mut self.auditor, span),
                input::batch::Event::LineEnd => input::SpanSink::line_end(&mut self.auditor),
            }
        }
    }

    /// Read on this thread alone, each line decoded and audited as it is read (what
    /// [`pipelined`](Self::pipelined) must match).
    #[cfg(test)]
    fn one_thread(&mut self, read: &mut dyn FnMut(&mut dyn input::LineSink)) {
        let mut lines = input::LineDecoder {
            sink: &mut self.auditor,
            stats: &mut self.stats,
            problems: &mut self.problems,
        };
        read(&mut lines);
    }

    /// The report so far: the traces finished until now (open ones are left open).
    fn snapshot(&self) -> Report {
        report::findings::build(report::findings::Inputs {
            acc: &self.auditor.acc,
            names: &self.auditor.names,
            input: self.stats.clone(),
            grouping: self.auditor.grouper.stats,
            problems: self.problems.clone(),
            rules: self.rules,
        })
    }

    fn finish(self) -> Report {
        let Auditor {
            names,
            mut grouper,
            mut acc,
        } = self.auditor;
        grouper.drain(&mut |spans, how| acc.trace(&spans, how, &names));
        report::findings::build(report::findings::Inputs {
            acc: &acc,
            names: &names,
            input: self.stats,
            grouping: grouper.stats,
            problems: self.problems,
            rules: self.rules,
        })
    }
}

/// Audit `files` (`-` is standard input), in order, as one stream of spans.
pub fn run(files: &[PathBuf], opts: &AuditOptions) -> Report {
    let mut s = Session::new(opts);
    let limits = s.limits;
    s.pipelined(input::batch::BATCH_BYTES, &mut |lines| {
        for file in files {
            input::read_path(file, limits, lines);
        }
    });
    s.finish()
}

/// Audit one stream (plain or gzip); `label` names it in problems.
pub fn run_reader(label: &str, reader: impl std::io::Read, opts: &AuditOptions) -> Report {
    let mut s = Session::new(opts);
    let limits = s.limits;
    let mut reader = Some(reader);
    s.pipelined(input::batch::BATCH_BYTES, &mut |lines| {
        if let Some(r) = reader.take() {
            input::read_stream(Box::new(r), label, limits, lines);
        }
    });
    s.finish()
}
