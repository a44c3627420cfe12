//! `hopbudget audit FILE…`: find where a chain of hops loses its deadline, from the traces an
//! operator already collects.
//!
//! It reads OTLP JSON traces ([`input`]: the demo's `traces-<mode>.otlp.jsonl`,
//! `hopbudget::observe::otlp`'s files, an OpenTelemetry Collector's `file` exporter output,
//! plain or gzip; or, with `--listen`, OTLP/HTTP export requests, protobuf or JSON, from an
//! SDK's or a Collector's exporter: [`listen`]; with `--kafka`, the records a Collector's Kafka
//! exporter writes), groups spans into traces as they stream past
//! ([`analysis::group`]), rebuilds each request's hop tree from the hop spans' `deadline.*` attributes (C14) and audits it
//! ([`analysis::analyze`]), then reports per hop ([`report`]): budget resets (a chain break, S13),
//! missing deadlines (C8), latency spikes at one exact value (a default timeout firing), late
//! work, refusals by depth ("entry budget too small for this chain depth", S6) and, for epoch
//! carriers, the clock offset between services (S3). On plain OpenTelemetry spans it finds,
//! from span kinds, parent ids and timing alone ([`analysis::timing`]), server work that went on after
//! its caller or the request had ended, duration spikes on client and server spans and the
//! chain depth; and reads outcomes from the standard status attributes ([`status`]) and
//! budget resets and drops from the deadline headers instrumentation captured
//! ([`analysis::header_reset`]); and maps the rollout per service ([`analysis::rollout`]).
//! Output is a table, JSON or an HTML page
//! ([`render`], [`page`]). The exit status is 1 when a chain break is found (from hop attributes or
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
//!
//! The code is three rooms, each importing only the ones before it: [`input`] (files, the
//! OTLP decoders, `--listen`, `--kafka`), [`analysis`] (grouping and one file per finding
//! family) and [`report`] (findings, severity, the table, JSON and HTML, and `--merge`, which
//! rebuilds a report from reports). Below them: the span model ([`span`], [`status`]), the
//! histograms, the problems and the settings ([`AuditOptions`]). This file holds the session
//! that runs the three in turn; [`command`] is the command line.

use std::path::PathBuf;

pub mod analysis;
pub mod command;
pub mod generate;
mod histogram;
pub mod input;
mod options;
mod problem;
pub mod report;
mod serde_as;
pub mod span;
pub mod status;

#[cfg(feature = "kafka")]
pub use input::kafka;
/// The OTLP/HTTP receiver (`--listen`), at its old path; it lives in [`input::listen`].
pub use input::listen;
pub use options::AuditOptions;
pub use problem::{Problem, ProblemKind};
/// `--merge`, at its old path; it lives in [`report::merge`].
pub use report::merge;
/// The HTML page (`--html`), at its old path: [`page::html`] works as before; it lives in
/// [`report::page`].
pub use report::page;
/// The table and JSON (`render::table`, `render::json`), at their old path; they live in
/// [`report::render`].
pub use report::render;
pub use report::{Finding, FindingKind, Forwards, Report, RolloutRow, Severity};

use analysis::{analyze, group};
use problem::Problems;

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
                names: span::Interner::new(span::NAMES_CAP),
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
            rules: report::rules::FindingRules::of(opts),
        }
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

/// The receivers (`--listen`, `--kafka`) feed a session through [`input::feed::Feed`].
impl input::feed::Feed for Session {
    type Report = Report;

    fn open(opts: &AuditOptions) -> Self {
        Self::new(opts)
    }

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

    fn problem(&mut self, label: &str, number: u64, reason: String) {
        self.stats.requests += 1;
        self.stats.lines += 1;
        self.stats.bad_lines += 1;
        self.problems
            .push(problem::Problem::new(label, Some(number), reason));
    }

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
        Session::finish(self)
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
