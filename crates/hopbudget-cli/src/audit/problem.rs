//! What could not be read, at the bottom of the audit: the input finds problems, the report
//! lists them, and the merge adds them up, so they live below all three.

use std::fmt;

use serde::Serialize;

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
    /// How many are kept in full, and how many kinds (`--merge` keeps to it too).
    pub(crate) cap: usize,
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
