//! The cases: each sends the service one request on its own connection, plays the downstream
//! the way the rule needs, and turns what it saw into scorecard lines. Every wait is bounded.
//! The same cases run over HTTP and gRPC; [`Wire`] holds what differs.
//!
//! One file, though long: the cases are one list, run in turn on one [`Run`] whose helpers
//! they share; each case is short and reads best beside the others.

use std::time::{Duration, SystemTime};

use hopbudget::codec;

use super::caller::{self, Answer, CallError, Target};
use super::downstream::{Call, Downstream, HOLD_LIMIT, Mode};
use super::scorecard::{Line, Verdict};
use super::wire::{Header, Wire, shown as headers_shown};

/// The longest the checker waits for an answer: above the downstream's hold, so that a
/// service that waits on it is seen giving up, not cut off.
const ANSWER_PATIENCE: Duration = Duration::from_secs(15);
/// How long a call the case expects (or must not see) may take to reach the downstream
/// after the service's answer or the request.
const CALL_PATIENCE: Duration = Duration::from_secs(3);
const STRAY_PATIENCE: Duration = Duration::from_millis(300);
/// A budget no sane maximum allows: what C9 sends.
const HUGE_MS: u64 = 1_000_000_000;
/// What "clamped" means for C9: at most an hour reaches the downstream.
const CLAMP_AT_MOST: Duration = Duration::from_secs(3600);

/// What the cases share: the service, the downstream, and the threshold if given.
#[derive(Debug)]
pub struct Run {
    /// The service under test.
    pub target: Target,
    /// The downstream the service calls.
    pub downstream: Downstream,
    /// `--min-budget`: the service's refuse threshold, instead of bisecting for it.
    pub min_budget: Option<Duration>,
    /// `--third-party`: a second downstream the service must tell no deadline (C19).
    pub third_party: Option<Downstream>,
    wire: Wire,
    cases: u64,
}

/// Bad input found while running: the run stops, exit 2.
pub type Abort = String;

impl Run {
    /// A run against `target`, its downstream played by `downstream`.
    pub fn new(target: Target, downstream: Downstream, min_budget: Option<Duration>) -> Self {
        let wire = if target.grpc { Wire::Grpc } else { Wire::Http };
        Self {
            target,
            downstream,
            min_budget,
            third_party: None,
            wire,
            cases: 0,
        }
    }

    /// Send the service one request with `headers` and this case's trace context.
    async fn send(&mut self, headers: Vec<Header>) -> Result<(caller::Pending, String), Abort> {
        let (id, trace) = self.trace();
        let mut all = headers;
        all.push(trace);
        let pending = caller::send(&self.target, &all)
            .await
            .map_err(|e| format!("the target {} is unreachable: {e}", self.target.addr))?;
        Ok((pending, id))
    }

    /// A fresh trace context per case, so that the downstream tells its calls apart from a
    /// late one of an earlier case (and a sidecar can match the service's calls to it).
    fn trace(&mut self) -> (String, (&'static str, String)) {
        self.cases += 1;
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let id = format!("{:016x}{:016x}", nanos as u64, self.cases);
        let header = format!("00-{id}-{:016x}-01", self.cases);
        (id, ("traceparent", header))
    }

    /// Send one request; the answer, and the case's call to the downstream if one came.
    async fn exchange(
        &mut self,
        mode: Mode,
        headers: Vec<Header>,
        expect_call: bool,
    ) -> Result<
        (
            Result<Answer, CallError>,
            Option<Call>,
            tokio::time::Instant,
        ),
        Abort,
    > {
        self.downstream.set_mode(mode);
        let (pending, id) = self.send(headers).await?;
        let sent = pending.sent();
        let answer = pending.answer(ANSWER_PATIENCE).await;
        if let Err(CallError::NotHttp(start)) = &answer {
            return Err(format!(
                "the target {} answers nothing like {}: {start:?}",
                self.target.addr,
                self.wire.name()
            ));
        }
        let patience = if expect_call {
            CALL_PATIENCE
        } else {
            STRAY_PATIENCE
        };
        let call = self.downstream.next_call(&id, patience).await;
        // Silence with no downstream call is a target that speaks nothing at all: stop
        // rather than wait out every case.
        if let (Err(CallError::NoAnswer(waited)), None) = (&answer, &call) {
            return Err(format!(
                "the target {} answered nothing within {} s and never called the downstream",
                self.target.addr,
                waited.as_secs()
            ));
        }
        Ok((answer, call, sent))
    }

    /// C1 and C2: a budget and a `Date` header hours off; the downstream must be told less
    /// than the budget minus the time the service held it, and the `Date` must change nothing.
    pub async fn c1_c2(&mut self) -> Result<Vec<Line>, Abort> {
        let budget = Duration::from_millis(2000);
        let date = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(3 * 3600));
        let headers = vec![self.wire.budget(2000), ("date", date)];
        let sent = format!("{} (3 h behind)", headers_shown(&headers));
        let (answer, call, at) = self.exchange(Mode::Measure, headers, true).await?;
        let mut lines = Vec::new();
        let c1_expects = "the Date header changes nothing: the downstream is called, told no more than the budget";
        let c2_expects = "the downstream is told strictly less than the budget minus the time the service held it";
        let Some(call) = call else {
            let observed = format!("{}; the downstream was never called", shown(&answer));
            lines.push(Line::new("C1", Verdict::Fail, &sent, &observed, c1_expects));
            lines.push(Line::new(
                "C2",
                Verdict::NotApplicable,
                &sent,
                observed,
                c2_expects,
            ));
            lines.push(clock_step());
            return Ok(lines);
        };
        let held = call.at.saturating_duration_since(at);
        match call.told() {
            Err(e) => {
                let observed = format!("the downstream was told {e}");
                lines.push(Line::new("C1", Verdict::Fail, &sent, &observed, c1_expects));
                lines.push(Line::new("C2", Verdict::Fail, &sent, observed, c2_expects));
            }
            Ok(None) => {
                let observed = format!(
                    "no deadline reached the downstream; {}",
                    hung_up(call, budget.checked_sub(held)).await
                );
                lines.push(Line::new(
                    "C1",
                    Verdict::Pass,
                    &sent,
                    "the downstream was called: the Date header did not expire the request",
                    c1_expects,
                ));
                lines.push(Line::new("C2", Verdict::Fail, &sent, observed, c2_expects));
            }
            Ok(Some((told, header))) => {
                let c1 = if told <= budget {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                };
                let observed = format!(
                    "downstream told {header}: {} ms, {} ms after the request",
                    told.as_millis(),
                    held.as_millis()
                );
                lines.push(Line::new("C1", c1, &sent, &observed, c1_expects));
                let left = budget.saturating_sub(held);
                let (verdict, observed) = if told < left {
                    let margin = left - told;
                    (
                        Verdict::Pass,
                        format!("{observed}: a margin of {} ms", margin.as_millis()),
                    )
                } else {
                    (
                        Verdict::Fail,
                        format!(
                            "{observed}: {} ms more than the {} ms left",
                            (told - left).as_millis(),
                            left.as_millis()
                        ),
                    )
                };
                lines.push(Line::new("C2", verdict, &sent, observed, c2_expects));
            }
        }
        lines.push(clock_step());
        Ok(lines)
    }

    /// C8: no deadline; the downstream must be told a finite edge default.
    pub async fn c8(&mut self) -> Result<Line, Abort> {
        let sent = "no deadline header";
        let expects = "the downstream is told a finite edge default";
        let (answer, call, _) = self.exchange(Mode::Measure, vec![], true).await?;
        let Some(call) = call else {
            return Ok(Line::new(
                "C8",
                Verdict::NotApplicable,
                sent,
                format!("{}; the downstream was never called", shown(&answer)),
                expects,
            ));
        };
        Ok(match call.told() {
            Ok(Some((told, header))) => Line::new(
                "C8",
                Verdict::Pass,
                sent,
                format!(
                    "downstream told {header}: {} ms (the edge default)",
                    told.as_millis()
                ),
                expects,
            ),
            Ok(None) => Line::new(
                "C8",
                Verdict::Fail,
                sent,
                format!(
                    "no deadline reached the downstream; {}",
                    hung_up(call, None).await
                ),
                expects,
            ),
            Err(e) => Line::new(
                "C8",
                Verdict::Fail,
                sent,
                format!("the downstream was told {e}"),
                expects,
            ),
        })
    }

    /// C4 and C10: the downstream never answers; 504 near the deadline, never 429.
    pub async fn c4_c10(&mut self) -> Result<Vec<Line>, Abort> {
        let budget = Duration::from_millis(1000);
        let tolerance = (budget / 10).max(Duration::from_millis(50));
        let headers = vec![self.wire.budget(1000)];
        let sent = format!("{}; the downstream never answers", headers_shown(&headers));
        let (c4, c10) = (self.wire.expects_c4(), self.wire.expects_c10());
        let (answer, call, _) = self.exchange(Mode::Hold, headers, true).await?;
        let reached = if call.is_some() {
            ""
        } else {
            " (the downstream was never called)"
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                let observed = format!("{e}{reached}");
                return Ok(vec![
                    Line::new("C4", Verdict::Fail, &sent, &observed, c4),
                    Line::new("C10", Verdict::Pass, &sent, observed, c10),
                ]);
            }
        };
        let off = answer.elapsed.abs_diff(budget);
        let expired = self.wire.is_expired(&answer);
        let gist = if expired {
            String::new()
        } else {
            format!(" ({:?})", answer.gist())
        };
        let observed = format!(
            "{answer}{gist}, {} ms from the deadline{reached}",
            off.as_millis()
        );
        let v4 = if expired && off <= tolerance {
            Verdict::Pass
        } else {
            Verdict::Fail
        };
        let v10 = if self.wire.is_quota(&answer) {
            Verdict::Fail
        } else {
            Verdict::Pass
        };
        Ok(vec![
            Line::new("C4", v4, &sent, &observed, c4),
            Line::new("C10", v10, &sent, observed, c10),
        ])
    }

    /// C5: the caller leaves mid-call; the service's downstream call must close within 1 s.
    pub async fn c5(&mut self) -> Result<Line, Abort> {
        let headers = vec![self.wire.budget(5000)];
        let sent = format!(
            "{}, then the caller {} once the downstream is called",
            headers_shown(&headers),
            match self.wire {
                Wire::Http => "hangs up",
                Wire::Grpc => "resets the stream",
            }
        );
        let expects = self.wire.expects_c5();
        self.downstream.set_mode(Mode::Hold);
        let (pending, id) = self.send(headers).await?;
        let Some(call) = self.downstream.next_call(&id, CALL_PATIENCE).await else {
            return Ok(Line::new(
                "C5",
                Verdict::NotApplicable,
                sent,
                "the downstream was never called",
                expects,
            ));
        };
        // A gRPC caller's connection stays open until the case ends: only the stream goes.
        let _left = pending.leave();
        let left = tokio::time::Instant::now();
        let limit = Duration::from_secs(1);
        let closed = tokio::time::timeout(limit * 2, call.closed).await;
        Ok(match closed {
            Ok(Ok(at)) if at.saturating_duration_since(left) <= limit => Line::new(
                "C5",
                Verdict::Pass,
                sent,
                format!(
                    "the downstream call closed {} ms after the caller left",
                    at.saturating_duration_since(left).as_millis()
                ),
                expects,
            ),
            Ok(Ok(at)) => Line::new(
                "C5",
                Verdict::Fail,
                sent,
                format!(
                    "the downstream call closed {} ms after the caller left",
                    at.saturating_duration_since(left).as_millis()
                ),
                expects,
            ),
            _ => Line::new(
                "C5",
                Verdict::Fail,
                sent,
                format!(
                    "the downstream call was still open {} ms after the caller left",
                    (limit * 2).as_millis()
                ),
                expects,
            ),
        })
    }

    /// C6: the downstream answers that the deadline expired, then (for a second request)
    /// that the call was cancelled; the service must not call it again for either request.
    pub async fn c6(&mut self) -> Result<Line, Abort> {
        let (expired, cancelled) = self.wire.expired_and_cancelled();
        let budget = self.wire.budget(2000);
        let sent = format!(
            "{}; the downstream answers {expired}; then again, answered {cancelled}",
            headers_shown(std::slice::from_ref(&budget))
        );
        let expects = "no second call after an expired or a cancelled answer";
        let mut seen = Vec::new();
        let mut verdict = Verdict::Pass;
        for (mode, outcome) in [(Mode::Expired, "expired"), (Mode::Cancelled, "cancelled")] {
            self.downstream.set_mode(mode);
            let (pending, id) = self.send(vec![budget.clone()]).await?;
            let answer = pending.answer(ANSWER_PATIENCE).await;
            if self
                .downstream
                .next_call(&id, CALL_PATIENCE)
                .await
                .is_none()
            {
                seen.push(format!(
                    "{outcome}: {}; the downstream was never called",
                    shown(&answer)
                ));
                if verdict == Verdict::Pass {
                    verdict = Verdict::NotApplicable;
                }
                continue;
            }
            // A retry comes at once or after a backoff; the answer has come back, so any
            // second call is already on its way or was made before it.
            let mut calls = 1;
            while self
                .downstream
                .next_call(&id, STRAY_PATIENCE)
                .await
                .is_some()
            {
                calls += 1;
            }
            if calls > 1 {
                verdict = Verdict::Fail;
            }
            seen.push(format!(
                "{outcome}: {}; the downstream was called {calls} time(s)",
                shown(&answer)
            ));
        }
        Ok(Line::new("C6", verdict, sent, seen.join("; "), expects))
    }

    /// C19: the service's call to a third party carries no deadline header.
    pub async fn c19(&mut self) -> Result<Line, Abort> {
        let budget = self.wire.budget(2000);
        let sent = format!(
            "{}; the service calls the third party too",
            headers_shown(std::slice::from_ref(&budget))
        );
        let expects = "no deadline header reaches a third party";
        let Some(mut third) = self.third_party.take() else {
            return Ok(Line::new(
                "C19",
                Verdict::NotApplicable,
                "nothing: no --third-party given",
                "not run",
                expects,
            ));
        };
        third.set_mode(Mode::Answer);
        self.downstream.set_mode(Mode::Answer);
        let (pending, id) = self.send(vec![budget]).await?;
        let answer = pending.answer(ANSWER_PATIENCE).await;
        let call = third.next_call(&id, CALL_PATIENCE).await;
        self.third_party = Some(third);
        let Some(call) = call else {
            return Ok(Line::new(
                "C19",
                Verdict::NotApplicable,
                sent,
                format!("{}; the third party was never called", shown(&answer)),
                expects,
            ));
        };
        let leaked: Vec<&str> = codec::WELL_KNOWN
            .iter()
            .copied()
            .filter(|name| call.header(name).is_some())
            .collect();
        Ok(if leaked.is_empty() {
            Line::new(
                "C19",
                Verdict::Pass,
                sent,
                "the third party was told no deadline",
                expects,
            )
        } else {
            Line::new(
                "C19",
                Verdict::Fail,
                sent,
                format!("the third party was told {}", leaked.join(", ")),
                expects,
            )
        })
    }

    /// A malformed deadline header: 400 (gRPC: INVALID_ARGUMENT) naming it, and no
    /// downstream call.
    pub async fn malformed(&mut self) -> Result<Line, Abort> {
        let headers = vec![self.wire.malformed()];
        let sent = headers_shown(&headers);
        let expects = self.wire.expects_malformed();
        let (answer, call, _) = self.exchange(Mode::Answer, headers, false).await?;
        let called = if call.is_some() {
            "; the downstream was called"
        } else {
            ""
        };
        let (verdict, observed) = match answer {
            Ok(a) => {
                let named = self.wire.names_carrier(&a);
                let verdict = if self.wire.is_malformed_answer(&a) && call.is_none() {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                };
                let naming = if named {
                    "naming the header"
                } else {
                    "not naming the header"
                };
                let gist = if verdict == Verdict::Pass {
                    String::new()
                } else {
                    format!(" ({:?})", a.gist())
                };
                (verdict, format!("{a}, {naming}{called}{gist}"))
            }
            Err(e) => (Verdict::Fail, format!("{e}{called}")),
        };
        Ok(Line::new("malformed", verdict, sent, observed, expects))
    }

    /// C9: a budget of 10^9 ms must reach the downstream clamped.
    pub async fn c9(&mut self) -> Result<Line, Abort> {
        let headers = vec![self.wire.budget(HUGE_MS)];
        let sent = headers_shown(&headers);
        let expects = "clamped to a maximum (at most an hour reaches the downstream)";
        let (answer, call, _) = self.exchange(Mode::Answer, headers, true).await?;
        let Some(call) = call else {
            return Ok(Line::new(
                "C9",
                Verdict::NotApplicable,
                sent,
                format!("{}; the downstream was never called", shown(&answer)),
                expects,
            ));
        };
        Ok(match call.told() {
            Ok(Some((told, header))) => {
                let verdict = if told <= CLAMP_AT_MOST {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                };
                Line::new(
                    "C9",
                    verdict,
                    sent,
                    format!("downstream told {header}: {} ms", told.as_millis()),
                    expects,
                )
            }
            Ok(None) => Line::new(
                "C9",
                Verdict::Fail,
                sent,
                "no deadline reached the downstream",
                expects,
            ),
            Err(e) => Line::new(
                "C9",
                Verdict::Fail,
                sent,
                format!("the downstream was told {e}"),
                expects,
            ),
        })
    }

    /// Two carriers that disagree: the tighter one wins.
    pub async fn tightest(&mut self) -> Result<Line, Abort> {
        let tight = Duration::from_millis(1500);
        let headers = vec![self.wire.budget(5000), self.wire.second_carrier(1500)];
        let sent = headers_shown(&headers);
        let expects = "the tighter carrier wins: the downstream is told less than 1500 ms";
        let (answer, call, _) = self.exchange(Mode::Answer, headers, true).await?;
        let Some(call) = call else {
            return Ok(Line::new(
                "tightest",
                Verdict::NotApplicable,
                sent,
                format!("{}; the downstream was never called", shown(&answer)),
                expects,
            ));
        };
        Ok(match call.told() {
            Ok(Some((told, header))) => Line::new(
                "tightest",
                if told < tight {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                },
                sent,
                format!("downstream told {header}: {} ms", told.as_millis()),
                expects,
            ),
            Ok(None) => Line::new(
                "tightest",
                Verdict::Fail,
                sent,
                "no deadline reached the downstream",
                expects,
            ),
            Err(e) => Line::new(
                "tightest",
                Verdict::Fail,
                sent,
                format!("the downstream was told {e}"),
                expects,
            ),
        })
    }

    /// C3: a budget below the service's threshold: 503 with `Retry-After` (gRPC:
    /// DEADLINE_EXCEEDED), no downstream call. The threshold is `--min-budget`, or found by
    /// bisection between 1 ms and 1 s.
    pub async fn c3(&mut self) -> Result<Line, Abort> {
        let expects = self.wire.expects_c3();
        let carrier = self.wire.carrier();
        // The answer judged is the one to the highest budget the service did not pass on:
        // sending it again could land on the other side of a threshold that moves by a
        // millisecond with the time the service holds it.
        let (ms, found, answer, call) = match self.min_budget {
            Some(min) => {
                let ms = u64::try_from((min / 2).as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1);
                let (answer, call) = self.probe(ms).await?;
                (ms, String::new(), answer, call)
            }
            None => {
                let mut refused = 1u64;
                let mut called = 1000u64;
                let (mut answer, call) = self.probe(refused).await?;
                if call.is_some() {
                    return Ok(Line::new(
                        "C3",
                        Verdict::Fail,
                        headers_shown(&[self.wire.budget(1)]),
                        "the downstream was called with a 1 ms budget: no threshold",
                        expects,
                    ));
                }
                if self.probe(called).await?.1.is_none() {
                    return Ok(Line::new(
                        "C3",
                        Verdict::NotApplicable,
                        format!("{carrier}: 1 ms and 1000 ms"),
                        "the downstream was not called even at 1000 ms: give --min-budget",
                        expects,
                    ));
                }
                while called - refused > 1 {
                    let mid = (refused + called) / 2;
                    let (probed, call) = self.probe(mid).await?;
                    if call.is_some() {
                        called = mid;
                    } else {
                        refused = mid;
                        answer = probed;
                    }
                }
                let found = format!(" (bisection: threshold {called} ms)");
                (refused, found, answer, None)
            }
        };
        let sent = format!("{}{found}", headers_shown(&[self.wire.budget(ms)]));
        let called = if call.is_some() {
            "; the downstream was called"
        } else {
            ""
        };
        let (verdict, observed) = match answer {
            Ok(a) => {
                let verdict = if self.wire.is_refusal(&a) && call.is_none() {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                };
                let retry = match (self.wire, a.header("retry-after")) {
                    (Wire::Grpc, _) => a
                        .header(codec::marker::OUTCOME)
                        .map_or("unmarked".to_owned(), |o| {
                            format!("{}: {o}", codec::marker::OUTCOME)
                        }),
                    (Wire::Http, None) => "no Retry-After".to_owned(),
                    (Wire::Http, Some(r)) => format!("Retry-After: {r}"),
                };
                let gist = if verdict == Verdict::Pass {
                    String::new()
                } else {
                    format!(" ({:?})", a.gist())
                };
                (verdict, format!("{a}, {retry}{called}{gist}"))
            }
            Err(e) => (Verdict::Fail, format!("{e}{called}")),
        };
        Ok(Line::new("C3", verdict, sent, observed, expects))
    }

    /// One request with budget `ms`; whether the downstream was called.
    async fn probe(&mut self, ms: u64) -> Result<(Result<Answer, CallError>, Option<Call>), Abort> {
        let budget = self.wire.budget(ms);
        let (answer, call, _) = self.exchange(Mode::Answer, vec![budget], false).await?;
        Ok((answer, call))
    }
}

/// The rest of C1, a step of the service's wall clock, said to be out of reach rather than
/// passed.
fn clock_step() -> Line {
    Line::new(
        "C1-step",
        Verdict::NotApplicable,
        "nothing: a step of the service's own clock",
        "cannot be seen from outside the service",
        "a step of the wall clock changes no budget (check it in the service's own tests)",
    )
}

/// The answer, or why there was none, for an observation.
fn shown(answer: &Result<Answer, CallError>) -> String {
    match answer {
        Ok(a) => format!("answered {a}"),
        Err(e) => e.to_string(),
    }
}

/// For a call that carried no deadline: how long the service waited on the downstream before
/// hanging up, which is the timeout it made up (bounded by the downstream's hold), or the
/// caller's deadline when it hung up then (`left`: what was left of it at the call; tonic's
/// server, say, keeps the deadline it was sent for its own wait but forwards none).
async fn hung_up(call: Call, left: Option<Duration>) -> String {
    let start = call.at;
    match tokio::time::timeout(HOLD_LIMIT + Duration::from_secs(1), call.closed).await {
        Ok(Ok(at)) if at.saturating_duration_since(start) < HOLD_LIMIT => {
            let waited = at.saturating_duration_since(start);
            let at_deadline = left.is_some_and(|left| {
                waited.abs_diff(left) <= (left / 10).max(Duration::from_millis(50))
            });
            let why = if at_deadline {
                "at the caller's deadline: kept for its own wait, not forwarded"
            } else {
                "a fresh default of its own"
            };
            format!(
                "the service hung up on it after {} ms: {why}",
                waited.as_millis()
            )
        }
        _ => format!(
            "the service still waited on it after {} s: no timeout at all",
            HOLD_LIMIT.as_secs()
        ),
    }
}
