//! Reading and decoding on two threads (#36 item 8): the reading thread inflates and splits
//! lines into batches of about [`BATCH_BYTES`]; a decoding thread turns each batch into its
//! spans, line ends, problems and counts, in input order, for a third thread to group and
//! audit. The channels between them hold [`IN_FLIGHT`] batches each, so memory stays bounded
//! (a few batches, or the longest line when it is longer than a batch) while both cores work.
//!
//! The names table is the decoding thread's; each decoded batch carries the names added since
//! the one before, appended in the same order to the auditing thread's copy, so a name has the
//! same [`Sym`](crate::audit::span::Sym) on both sides and the report is the same as when one
//! thread does everything (the `pipeline_matches_one_thread` test below).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};

use super::sink::{InputStats, SpanSink};
use super::{LineDecoder, LineSink};
use crate::audit::span::{Interner, Span};
use crate::audit::{Problem, Problems};

/// Bytes of line text in a batch before it is handed over: large enough that handing over
/// costs nothing per span, small enough that a few in flight stay well under the span cap.
pub(crate) const BATCH_BYTES: usize = 512 * 1024;

/// Batches each channel holds.
pub(crate) const IN_FLIGHT: usize = 2;

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
pub(crate) struct Batcher {
    batch: LineBatch,
    max_bytes: usize,
    tx: Option<SyncSender<LineBatch>>,
    /// Input streams opened.
    pub(crate) files: u64,
}

impl Batcher {
    pub(crate) fn new(tx: SyncSender<LineBatch>, max_bytes: usize) -> Self {
        Self {
            batch: LineBatch {
                label: Arc::from(""),
                text: Vec::new(),
                items: Vec::new(),
            },
            max_bytes: max_bytes.max(1),
            tx: Some(tx),
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
        // A closed channel means the decoding thread is gone (it panicked): what is read
        // from here on is dropped, and the panic is raised when the threads are joined.
        if let Some(tx) = &self.tx
            && tx.send(full).is_err()
        {
            self.tx = None;
        }
    }

    /// Send what is left and close the channel.
    pub(crate) fn finish(mut self) -> u64 {
        self.flush();
        self.files
    }
}

impl LineSink for Batcher {
    fn file(&mut self) {
        self.files += 1;
    }

    fn line(&mut self, label: &str, line: &[u8], number: u64, ended: bool) {
        if *self.batch.label != *label {
            self.flush();
            self.batch.label = Arc::from(label);
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
    /// Names interned for the first time in this batch, in order.
    pub(crate) new_names: Vec<Box<str>>,
    /// The names table's overflow count after this batch.
    pub(crate) names_overflowed: u64,
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

/// The decoding thread: every batch from `rx` decoded and sent to `tx`, until `rx` closes.
/// `names` starts as a copy of the auditing thread's table.
pub(crate) fn decode(rx: Receiver<LineBatch>, tx: SyncSender<DecodedBatch>, mut names: Interner) {
    let mut sent_names = names.len();
    for batch in rx {
        let mut stats = InputStats::default();
        // Every problem of the batch, kept in order for the auditing thread's capped list.
        let mut problems = Problems::new(usize::MAX);
        let mut collect = Collect {
            names: &mut names,
            events: Vec::with_capacity(batch.items.len() * 64),
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
        let new_names = names.since(sent_names).to_vec();
        sent_names = names.len();
        let decoded = DecodedBatch {
            events,
            problems: problems.shown,
            stats,
            new_names,
            names_overflowed: names.overflowed,
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
