//! Reading and decoding on several threads (#36 item 8): the reading thread inflates and
//! splits lines into batches of about [`BATCH_BYTES`] and deals them in turn to
//! [`DECODERS`] decoding threads; each turns a batch into its spans, line ends, problems and
//! counts, in input order; the auditing thread takes the decoded batches back in the order
//! they were dealt, then groups and audits them. At most [`IN_FLIGHT_BYTES`] of line text are
//! handed over and not yet audited ([`InFlight`]; one line alone when it is longer), so memory
//! stays bounded by a few batches, or by the longest line, while both cores work.
//!
//! A decoding thread interns a batch's names in a table of its own ([`Interner::for_batch`]);
//! the auditing thread adopts them into the one table, in the order the batch first used
//! them ([`Interner::adopt`]), and renames the batch's spans, so every name gets the symbol
//! (and every overflow the count) it gets when one thread does everything, and the report is
//! the same (the `pipeline_matches_one_thread` test below).

use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::sink::{InputStats, SpanSink};
use super::{LineDecoder, LineSink};
use crate::audit::problem::{Problem, Problems};
use crate::audit::span::{Interner, Span, Sym};

/// Bytes of line text in a batch before it is handed over: large enough that handing over
/// costs nothing per span, small enough that the batches in flight stay a few MB.
pub(crate) const BATCH_BYTES: usize = 256 * 1024;

/// Batches each channel holds.
pub(crate) const IN_FLIGHT: usize = 1;

/// Line text read and not yet audited: room for a batch at each stage (two decoding, one
/// auditing, one queued at each decoder) and one more being filled.
pub(crate) const IN_FLIGHT_BYTES: usize = 6 * BATCH_BYTES;

/// The bytes of line text handed over and not yet audited. The reading thread waits while
/// they are at the cap, so a batch of one overlong line (up to `--max-line-bytes`) goes alone.
pub(crate) struct InFlight {
    state: Mutex<(usize, bool)>,
    freed: Condvar,
    cap: usize,
}

impl InFlight {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            state: Mutex::new((0, false)),
            freed: Condvar::new(),
            cap,
        }
    }

    /// Wait until `n` more bytes fit (at once when nothing is in flight), then count them.
    fn take(&self, n: usize) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while !state.1 && state.0 > 0 && state.0 + n > self.cap {
            state = self
                .freed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.0 += n;
    }

    /// Count `n` more bytes without waiting (the rest of a batch whose first line waited).
    fn take_more(&self, n: usize) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).0 += n;
    }

    /// `n` bytes were audited.
    pub(crate) fn give(&self, n: usize) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_sub(n);
        self.freed.notify_all();
    }

    /// The auditing thread is done (or gone): nothing will be given back, never wait again.
    pub(crate) fn close(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        self.freed.notify_all();
    }
}

/// Decoding threads: decoding is most of the work (about two thirds of the instructions),
/// so two of them keep two cores busy beside the reading and auditing threads.
pub(crate) const DECODERS: usize = 2;

/// Lines of one input, as read.
pub(crate) struct LineBatch {
    label: Arc<str>,
    text: Vec<u8>,
    items: Vec<Item>,
}

enum Item {
    /// A line: its text ends at `end` in `text` (it starts where the one before ended).
    Line {
        end: usize,
        number: u64,
        ended: bool,
    },
    BadLine(Problem),
    Problem(Problem),
}

/// The reading thread's [`LineSink`]: fills batches and sends them.
pub(crate) struct Batcher<'a> {
    batch: LineBatch,
    in_flight: &'a InFlight,
    max_bytes: usize,
    /// The decoding threads' channels, dealt batches in turn.
    txs: Vec<SyncSender<LineBatch>>,
    sent: usize,
    /// A decoding thread is gone (it panicked): the rest is dropped, and the panic is raised
    /// when the threads are joined.
    closed: bool,
    /// Input streams opened.
    pub(crate) files: u64,
}

impl<'a> Batcher<'a> {
    pub(crate) fn new(
        txs: Vec<SyncSender<LineBatch>>,
        max_bytes: usize,
        in_flight: &'a InFlight,
    ) -> Self {
        Self {
            batch: LineBatch {
                label: Arc::from(""),
                text: Vec::new(),
                items: Vec::new(),
            },
            in_flight,
            max_bytes: max_bytes.max(1),
            txs,
            sent: 0,
            closed: false,
            files: 0,
        }
    }

    fn flush(&mut self) {
        if self.batch.items.is_empty() {
            return;
        }
        let label = Arc::clone(&self.batch.label);
        let full = std::mem::replace(
            &mut self.batch,
            LineBatch {
                label,
                text: Vec::with_capacity(self.max_bytes + self.max_bytes / 4),
                items: Vec::new(),
            },
        );
        if self.closed || self.txs.is_empty() {
            return;
        }
        let tx = &self.txs[self.sent % self.txs.len()];
        self.sent += 1;
        if tx.send(full).is_err() {
            self.closed = true;
        }
    }

    /// Send what is left and close the channel.
    pub(crate) fn finish(mut self) -> u64 {
        self.flush();
        self.files
    }
}

impl LineSink for Batcher<'_> {
    fn file(&mut self) {
        self.files += 1;
    }

    fn line(&mut self, label: &str, line: &[u8], number: u64, ended: bool) {
        if *self.batch.label != *label {
            self.flush();
            self.batch.label = Arc::from(label);
        }
        // Counted before it is copied: an overlong line waits until the batches before it
        // are audited, so it is held twice at most (here and in the reader's line buffer).
        if self.batch.text.is_empty() {
            // Nothing of this batch is counted yet: a batch waits for room whole, so a batch
            // already in flight is never waited for by its own lines.
            self.in_flight.take(line.len());
        } else {
            self.in_flight.take_more(line.len());
        }
        self.batch.text.extend_from_slice(line);
        self.batch.items.push(Item::Line {
            end: self.batch.text.len(),
            number,
            ended,
        });
        if self.batch.text.len() >= self.max_bytes {
            self.flush();
        }
    }

    fn bad_line(&mut self, problem: Problem) {
        self.batch.items.push(Item::BadLine(problem));
    }

    fn problem(&mut self, problem: Problem) {
        self.batch.items.push(Item::Problem(problem));
    }
}

/// What the decoding thread made of one batch.
pub(crate) struct DecodedBatch {
    /// Spans and line ends, in input order.
    pub(crate) events: Vec<Event>,
    /// Problems, in input order.
    pub(crate) problems: Vec<Problem>,
    /// Counts of this batch (`files` is counted by the reading thread).
    pub(crate) stats: InputStats,
    /// The batch's own names table: the spans' symbols are its.
    pub(crate) names: Interner,
    /// Bytes of line text it was decoded from (given back to [`InFlight`] once audited).
    pub(crate) text_bytes: usize,
}

impl DecodedBatch {
    /// Move the batch's spans onto the auditing thread's names table.
    pub(crate) fn adopt_names(&mut self, names: &mut Interner) {
        let batch = std::mem::replace(&mut self.names, Interner::for_batch());
        let map = names.adopt(batch);
        let to = |s: Sym| map.get(s.0 as usize).copied().unwrap_or(Interner::OVERFLOW);
        for event in &mut self.events {
            if let Event::Span(span) = event {
                span.service = to(span.service);
                span.name = to(span.name);
                if let Some(hop) = &mut span.hop {
                    hop.source = hop.source.map(to);
                }
            }
        }
    }
}

/// One decoded span or the end of a line.
pub(crate) enum Event {
    Span(Span),
    LineEnd,
}

struct Collect<'a> {
    names: &'a mut Interner,
    events: Vec<Event>,
}

impl SpanSink for Collect<'_> {
    fn names(&mut self) -> &mut Interner {
        self.names
    }

    fn span(&mut self, span: Span) {
        self.events.push(Event::Span(span));
    }

    fn line_end(&mut self) {
        self.events.push(Event::LineEnd);
    }
}

/// A decoding thread: every batch from `rx` decoded and sent to `tx`, until `rx` closes.
pub(crate) fn decode(rx: Receiver<LineBatch>, tx: SyncSender<DecodedBatch>) {
    for batch in rx {
        let mut stats = InputStats::default();
        // Every problem of the batch, kept in order for the auditing thread's capped list.
        let mut problems = Problems::new(usize::MAX);
        let mut names = Interner::for_batch();
        let mut collect = Collect {
            names: &mut names,
            // About one span per 500 bytes of OTLP JSON: room enough that the vector rarely
            // grows (each growth copies every span decoded so far).
            events: Vec::with_capacity(batch.text.len() / 256 + batch.items.len()),
        };
        let mut lines = LineDecoder {
            sink: &mut collect,
            stats: &mut stats,
            problems: &mut problems,
        };
        let mut start = 0;
        for item in batch.items {
            match item {
                Item::Line { end, number, ended } => {
                    let text = batch.text.get(start..end).unwrap_or_default();
                    lines.line(&batch.label, text, number, ended);
                    start = end;
                }
                Item::BadLine(p) => lines.bad_line(p),
                Item::Problem(p) => lines.problem(p),
            }
        }
        let events = collect.events;
        let decoded = DecodedBatch {
            events,
            problems: problems.shown,
            stats,
            names,
            text_bytes: batch.text.len(),
        };
        if tx.send(decoded).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::audit::{AuditOptions, Session, generate, input, render};

    fn fixture(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/otel-python")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Bad lines, bad spans, an overlong line and a line cut short, between good ones.
    fn bad_input(good: &[u8]) -> Vec<u8> {
        let good = String::from_utf8(good.to_vec()).expect("generated text is UTF-8");
        let mut lines = good.lines();
        let first = lines.next().expect("a line");
        let bad_span = first.replacen("\"spanId\":\"", "\"spanId\":\"zz", 1);
        let mut text = format!("not json\n{bad_span}\n\n{}\n", "x".repeat(1_100_000));
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(&first[..first.len() / 2]);
        text.into_bytes()
    }

    /// 24,000 hop spans, each name used twice: 12,000 names, past the names table's cap of
    /// 10,000, so overflowed names and their count must come out as on one thread.
    fn many_names() -> Vec<u8> {
        let mut text = String::new();
        for line in 0..240u64 {
            let spans: Vec<String> = (0..100u64)
                .map(|i| {
                    let n = line * 100 + i;
                    let (trace, id, parent) = (n / 3 + 1, n % 3 + 1, n % 3);
                    let parent = if parent == 0 {
                        String::new()
                    } else {
                        format!("{parent:016x}")
                    };
                    // Hop spans whose source is interned after new span names, so that
                    // its symbol in a batch differs from the one in the whole table.
                    let source = ["local", "relative-ms", "fallback"][(n % 3) as usize];
                    format!(
                        r#"{{"traceId":"{trace:032x}","spanId":"{id:016x}","parentSpanId":"{parent}","name":"op-{}","kind":2,"startTimeUnixNano":"{}","endTimeUnixNano":"{}","attributes":[{{"key":"deadline.source","value":{{"stringValue":"{source}"}}}},{{"key":"deadline.remaining_ms","value":{{"intValue":"{}"}}}}]}}"#,
                        n - n % 2,
                        1_000_000 * n,
                        1_000_000 * n + 5_000_000,
                        900 - n % 50
                    )
                })
                .collect();
            text.push_str(&format!(
                r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"svc-{}"}}}}]}},"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
                line % 5,
                spans.join(",")
            ));
            text.push('\n');
        }
        text.into_bytes()
    }

    /// The report's JSON, reading `text` on one thread, or pipelined in batches of
    /// `batch_bytes`.
    fn report(text: &[u8], opts: &AuditOptions, batch_bytes: Option<usize>) -> String {
        let mut s = Session::new(opts);
        let limits = s.limits;
        let mut read = |lines: &mut dyn input::LineSink| {
            input::read_stream(Box::new(text), "t.jsonl", limits, lines);
        };
        match batch_bytes {
            Some(b) => s.pipelined(b, &mut read),
            None => s.one_thread(&mut read),
        }
        render::json(&s.finish())
    }

    #[test]
    fn pipeline_matches_one_thread() {
        let mut generated = Vec::new();
        generate::write(&mut generated, 12_000, Some("warehouse-router"), 5).expect("generated");
        let inputs = [
            ("python", fixture("plain-otel.jsonl.gz")),
            ("python-base64", fixture("plain-otel-base64ids.jsonl.gz")),
            ("bad", bad_input(&generated)),
            ("many names", many_names()),
            ("generated", generated),
        ];
        let default = AuditOptions {
            max_line_bytes: 1 << 20,
            ..AuditOptions::default()
        };
        // Tight bounds, so that when traces are finished (at line ends, by eviction) matters.
        let tight = AuditOptions {
            settle_spans: 300,
            max_open_spans: 700,
            ..default.clone()
        };
        for (name, text) in &inputs {
            for opts in [&default, &tight] {
                let alone = report(text, opts, None);
                assert!(alone.contains("\"spans\""), "{name}: {alone}");
                for batch in [1, 3_000, 300_000, super::BATCH_BYTES] {
                    assert_eq!(
                        report(text, opts, Some(batch)),
                        alone,
                        "{name}, batches of {batch} bytes, settle {}",
                        opts.settle_spans
                    );
                }
            }
        }
    }
}
