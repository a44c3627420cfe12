//! Grouping a stream of spans into traces with bounded memory.
//!
//! Exporters write spans in batches as they end, so one trace's spans arrive spread over a
//! few lines, children usually before their root. A trace is held open until it can be
//! finished: its root span has arrived and `settle` more spans of other traces have been read
//! since its last span (checked at line ends, so a whole export batch is always in). Two
//! bounds keep memory flat whatever the input: at most `max_open_spans` spans are held (past
//! it the least recently active trace is finished early), and a trace whose root never comes
//! is finished as partial once it has been idle for `4 * settle` spans. Spans arriving for a
//! trace already finished are counted (`late_spans`) and audited as a partial fragment.

use std::collections::{BTreeMap, VecDeque};

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use crate::audit::span::Span;

/// Why a trace was handed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Root seen and quiet for `settle` spans, or end of input.
    Complete,
    /// Evicted to stay under `max_open_spans`.
    Evicted,
    /// No root arrived.
    Rootless,
}

/// Bounds of the grouper.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupLimits {
    pub(crate) settle: u64,
    pub(crate) max_open_spans: usize,
}

struct OpenTrace {
    spans: Vec<Span>,
    last: u64,
    has_root: bool,
}

/// Counts the grouper keeps for the report.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct GroupStats {
    /// Traces finished.
    pub traces: u64,
    /// Traces finished early to stay within `--max-open-spans`.
    pub evicted: u64,
    /// Traces finished without a root span.
    pub rootless: u64,
    /// Spans that arrived after their trace was finished (raise `--settle-spans`).
    pub late_spans: u64,
    /// The most spans held open at once.
    pub peak_open_spans: u64,
}

pub(crate) struct Grouper {
    open: HashMap<u128, OpenTrace>,
    // Traces by their last activity (span sequence number): the oldest first.
    by_last: BTreeMap<u64, u128>,
    seq: u64,
    open_spans: usize,
    limits: GroupLimits,
    finished: HashSet<u128>,
    finished_order: VecDeque<u128>,
    pub(crate) stats: GroupStats,
}

/// How many finished trace ids are remembered to recognise late spans.
const REMEMBER_FINISHED: usize = 65_536;

impl Grouper {
    pub(crate) fn new(limits: GroupLimits) -> Self {
        Self {
            open: HashMap::new(),
            by_last: BTreeMap::new(),
            seq: 0,
            open_spans: 0,
            limits: GroupLimits {
                settle: limits.settle.max(1),
                max_open_spans: limits.max_open_spans.max(1),
            },
            finished: HashSet::new(),
            finished_order: VecDeque::new(),
            stats: GroupStats::default(),
        }
    }

    /// Add one span; `done` receives any trace finished to make room.
    pub(crate) fn push(&mut self, span: Span, done: &mut dyn FnMut(Vec<Span>, Finish)) {
        self.seq += 1;
        let seq = self.seq;
        if self.finished.contains(&span.trace) {
            self.stats.late_spans += 1;
        }
        let t = self.open.entry(span.trace).or_insert_with(|| OpenTrace {
            spans: Vec::new(),
            last: 0,
            has_root: false,
        });
        if t.last != 0 {
            self.by_last.remove(&t.last);
        }
        t.last = seq;
        t.has_root |= span.parent == 0;
        t.spans.push(span);
        self.by_last.insert(seq, span.trace);
        self.open_spans += 1;
        while self.open_spans > self.limits.max_open_spans {
            let Some((_, trace)) = self.by_last.pop_first() else {
                break;
            };
            self.finish(trace, Finish::Evicted, done);
        }
        self.stats.peak_open_spans = self.stats.peak_open_spans.max(self.open_spans as u64);
    }

    /// At a line end: finish every trace that has settled.
    pub(crate) fn line_end(&mut self, done: &mut dyn FnMut(Vec<Span>, Finish)) {
        let settle = self.limits.settle;
        let Some(cutoff) = self.seq.checked_sub(settle) else {
            return;
        };
        let rootless_cutoff = self.seq.saturating_sub(settle.saturating_mul(4));
        let ready: Vec<(u64, u128)> = self
            .by_last
            .range(..=cutoff)
            .map(|(&k, &v)| (k, v))
            .collect();
        for (last, trace) in ready {
            let has_root = self.open.get(&trace).is_some_and(|t| t.has_root);
            if has_root {
                self.by_last.remove(&last);
                self.finish(trace, Finish::Complete, done);
            } else if last <= rootless_cutoff {
                self.by_last.remove(&last);
                self.finish(trace, Finish::Rootless, done);
            }
        }
    }

    /// End of input: finish everything still open, oldest first.
    pub(crate) fn drain(&mut self, done: &mut dyn FnMut(Vec<Span>, Finish)) {
        while let Some((_, trace)) = self.by_last.pop_first() {
            let has_root = self.open.get(&trace).is_some_and(|t| t.has_root);
            let how = if has_root {
                Finish::Complete
            } else {
                Finish::Rootless
            };
            self.finish(trace, how, done);
        }
    }

    fn finish(&mut self, trace: u128, how: Finish, done: &mut dyn FnMut(Vec<Span>, Finish)) {
        let Some(t) = self.open.remove(&trace) else {
            return;
        };
        self.open_spans -= t.spans.len();
        self.stats.traces += 1;
        match how {
            Finish::Complete => {}
            Finish::Evicted => self.stats.evicted += 1,
            Finish::Rootless => self.stats.rootless += 1,
        }
        if self.finished.insert(trace) {
            self.finished_order.push_back(trace);
            if self.finished_order.len() > REMEMBER_FINISHED
                && let Some(old) = self.finished_order.pop_front()
            {
                self.finished.remove(&old);
            }
        }
        done(t.spans, how);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::span::Sym;

    fn span(trace: u128, id: u64, parent: u64) -> Span {
        Span {
            trace,
            id,
            parent,
            service: Sym(1),
            name: Sym(1),
            kind: 2,
            start_ns: 0,
            end_ns: 0,
            hop: None,
            std: Default::default(),
            deadline_header: false,
            header_ms: None,
            own_timeout: false,
            proxy: Default::default(),
            peer: None,
        }
    }

    fn run(limits: GroupLimits, lines: &[&[Span]]) -> (Vec<(u128, usize, Finish)>, GroupStats) {
        let mut g = Grouper::new(limits);
        let mut out = Vec::new();
        let mut done = |spans: Vec<Span>, how| out.push((spans[0].trace, spans.len(), how));
        for line in lines {
            for s in *line {
                g.push(*s, &mut done);
            }
            g.line_end(&mut done);
        }
        g.drain(&mut done);
        (out, g.stats)
    }

    #[test]
    fn a_trace_waits_for_its_root_and_for_quiet() {
        let limits = GroupLimits {
            settle: 2,
            max_open_spans: 100,
        };
        // Trace 1: child in line 1, root in line 2; trace 2 fills the stream after.
        let (out, stats) = run(
            limits,
            &[
                &[span(1, 2, 1)],
                &[span(1, 1, 0), span(2, 1, 0)],
                &[span(2, 2, 1), span(2, 3, 1)],
            ],
        );
        assert_eq!(out[0], (1, 2, Finish::Complete));
        assert_eq!(out[1], (2, 3, Finish::Complete));
        assert_eq!(stats.late_spans, 0);
    }

    #[test]
    fn memory_stays_under_the_cap() {
        let limits = GroupLimits {
            settle: 1_000,
            max_open_spans: 3,
        };
        let line: Vec<Span> = (1..=10).map(|t| span(t, 1, 0)).collect();
        let (out, stats) = run(limits, &[&line]);
        assert_eq!(out.len(), 10);
        assert_eq!(stats.peak_open_spans, 3);
        assert_eq!(stats.evicted, 7);
    }

    #[test]
    fn late_spans_and_rootless_traces_are_counted() {
        let limits = GroupLimits {
            settle: 1,
            max_open_spans: 100,
        };
        let (out, stats) = run(
            limits,
            &[
                &[span(1, 1, 0)],
                &[span(2, 1, 0)],
                &[span(1, 2, 1)],
                &[span(3, 5, 4)],
            ],
        );
        assert_eq!(stats.late_spans, 1);
        assert!(out.iter().any(|o| o.2 == Finish::Rootless));
    }
}
