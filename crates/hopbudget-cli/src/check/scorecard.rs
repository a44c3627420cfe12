//! The scorecard: one line per rule, with what was sent, what was observed and what the rule
//! expects, as text for a person or JSON for CI, and the exit status it implies.

use std::fmt::Write as _;
use std::process::ExitCode;

use serde::Serialize;

/// What one rule's check concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The service kept the rule.
    Pass,
    /// The service broke the rule.
    Fail,
    /// The check could not tell from outside (say, the downstream was never reached).
    NotApplicable,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::NotApplicable => "n/a",
        }
    }
}

/// One rule's line on the scorecard.
#[derive(Clone, Debug, Serialize)]
pub struct Line {
    /// The contract rule (`C2`) or the check's name (`malformed`, `tightest`).
    pub rule: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// What the checker sent the service.
    pub sent: String,
    /// What it saw: the answer, and what the downstream was told.
    pub observed: String,
    /// What the rule expects.
    pub expects: &'static str,
}

impl Line {
    /// A line with its verdict.
    pub fn new(
        rule: &'static str,
        verdict: Verdict,
        sent: impl Into<String>,
        observed: impl Into<String>,
        expects: &'static str,
    ) -> Self {
        Self {
            rule,
            verdict,
            sent: sent.into(),
            observed: observed.into(),
            expects,
        }
    }
}

/// Every line of one run, and what it was run against.
#[derive(Clone, Debug, Serialize)]
pub struct Scorecard {
    /// The service under test.
    pub target: String,
    /// Where the checker played the downstream.
    pub downstream: String,
    /// One line per rule, in the order the cases ran.
    pub lines: Vec<Line>,
}

impl Scorecard {
    /// Whether some rule failed.
    pub fn failed(&self) -> bool {
        self.lines.iter().any(|l| l.verdict == Verdict::Fail)
    }

    /// Whether no line could be judged: the run proved nothing.
    pub fn all_not_applicable(&self) -> bool {
        self.lines
            .iter()
            .all(|l| l.verdict == Verdict::NotApplicable)
    }

    /// The line for `rule`, if the run has one.
    pub fn line(&self, rule: &str) -> Option<&Line> {
        self.lines.iter().find(|l| l.rule == rule)
    }

    /// 1 when some rule failed, 2 when nothing could be judged, 0 otherwise.
    pub fn exit_code(&self) -> ExitCode {
        if self.failed() {
            ExitCode::from(1)
        } else if self.all_not_applicable() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    }

    /// The scorecard as text: a header, then per rule its verdict and three indented lines.
    pub fn text(&self) -> String {
        let mut out = format!(
            "hopbudget check: {} (downstream played on {})\n",
            self.target, self.downstream
        );
        for line in &self.lines {
            let _ = writeln!(
                out,
                "{:<4} {:<9} sent: {}\n               observed: {}\n               expects: {}",
                line.verdict.word(),
                line.rule,
                line.sent,
                line.observed,
                line.expects
            );
        }
        let count = |v| self.lines.iter().filter(|l| l.verdict == v).count();
        let _ = writeln!(
            out,
            "{} pass, {} fail, {} not applicable",
            count(Verdict::Pass),
            count(Verdict::Fail),
            count(Verdict::NotApplicable)
        );
        out
    }

    /// The scorecard as pretty JSON, for CI.
    pub fn json(&self) -> String {
        // Plain strings and enums: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(verdicts: &[Verdict]) -> Scorecard {
        Scorecard {
            target: "http://127.0.0.1:1/".into(),
            downstream: "127.0.0.1:2".into(),
            lines: verdicts
                .iter()
                .map(|v| Line::new("C2", *v, "sent", "observed", "expects"))
                .collect(),
        }
    }

    #[test]
    fn a_failed_rule_is_exit_1_and_a_run_that_judged_nothing_is_exit_2() {
        use Verdict::*;
        assert_eq!(card(&[Pass, NotApplicable]).exit_code(), ExitCode::SUCCESS);
        assert_eq!(card(&[Pass, Fail]).exit_code(), ExitCode::from(1));
        assert_eq!(
            card(&[NotApplicable, NotApplicable]).exit_code(),
            ExitCode::from(2)
        );
    }

    #[test]
    fn the_json_names_each_rule_and_its_verdict() {
        let json: serde_json::Value =
            serde_json::from_str(&card(&[Verdict::NotApplicable]).json()).unwrap();
        assert_eq!(json["lines"][0]["rule"], "C2");
        assert_eq!(json["lines"][0]["verdict"], "not-applicable");
        assert!(card(&[Verdict::Fail]).text().contains("FAIL C2"));
    }
}
