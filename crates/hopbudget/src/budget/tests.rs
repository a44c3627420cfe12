//! Unit tests of `RequestBudget`'s API. One file on purpose, over 500 lines: the tests of one
//! type, read beside the type's one file of methods (`budget/mod.rs`).

use std::cell::Cell;

use super::node::SPARE;
use super::*;

fn budget(ms: u64) -> RequestBudget {
    RequestBudget::local(Duration::from_millis(ms), HopPolicy::DEFAULT)
}

#[test]
fn a_recycled_budget_comes_back_as_a_new_one() {
    let old = budget(500);
    let old_id = old.id();
    old.expire();
    let at = Arc::as_ptr(&old.inner);
    old.recycle();
    let new = budget(80);
    assert_eq!(Arc::as_ptr(&new.inner), at, "the allocation was reused");
    // Nothing of the old budget shows through.
    assert_eq!(new.recorded_cause(), None);
    assert!(!new.token().is_cancelled());
    assert_ne!(new.id(), old_id);
    assert_eq!(new.at_arrival(), Duration::from_millis(80));
}

/// Whether this thread keeps a budget's allocation for the next one.
fn spare_kept() -> bool {
    SPARE.with(|spare| {
        let kept = spare.take();
        let is = kept.is_some();
        spare.set(kept);
        is
    })
}

#[test]
fn a_budget_held_elsewhere_or_owning_a_parent_is_not_recycled() {
    drop(SPARE.with(Cell::take));
    let held = budget(500);
    let other = held.clone();
    held.recycle();
    assert!(
        !spare_kept(),
        "a budget still held elsewhere was kept for reuse"
    );
    let _new = budget(80);
    assert_eq!(other.at_arrival(), Duration::from_millis(500));
    assert_eq!(other.recorded_cause(), None);

    let parent = budget(500);
    parent.child().recycle();
    assert!(!spare_kept(), "a child was kept, and its parent with it");
    let with_token = budget(500);
    let _token = with_token.token();
    with_token.recycle();
    assert!(!spare_kept(), "a budget with a token was kept");
    budget(500).recycle();
    assert!(spare_kept());
}

#[tokio::test(start_paused = true)]
async fn forward_subtracts_margin_and_transit() {
    let b = budget(500);
    assert_eq!(b.forward(), Duration::from_millis(494));
    tokio::time::advance(Duration::from_millis(490)).await;
    assert_eq!(b.forward(), Duration::from_millis(4));
    tokio::time::advance(Duration::from_millis(5)).await;
    assert_eq!(b.forward(), Duration::ZERO, "never negative");
    assert_eq!(b.at_arrival(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn admit_states_required_and_remaining() {
    let b = budget(120);
    let err = b.admit(Duration::from_millis(200)).unwrap_err();
    let BudgetError::Refused(r) = err else {
        panic!("{err:?}")
    };
    assert_eq!(r.required(), Duration::from_millis(200));
    assert_eq!(r.remaining(), Duration::from_millis(120));
    assert_eq!(
        r.to_string(),
        "refused before start: needs 200 ms, 120 ms remain"
    );
    assert!(b.admit(Duration::from_millis(100)).is_ok());
}

#[tokio::test(start_paused = true)]
async fn admit_forward_refuses_below_threshold() {
    let b = budget(15); // forward = 9 ms < 10 ms threshold
    assert!(matches!(b.admit_forward(), Err(BudgetError::Refused(_))));
    let b = budget(16);
    assert_eq!(b.admit_forward(), Ok(Duration::from_millis(10)));
    assert!(matches!(
        b.admit_forward_for(Duration::from_millis(50)),
        Err(BudgetError::Refused(r)) if r.required() == Duration::from_millis(50)
    ));
}

#[tokio::test(start_paused = true)]
async fn expiry_is_not_cancellation() {
    let b = budget(100);
    let child = b.child();
    let waiter = tokio::spawn({
        let child = child.clone();
        async move { child.done().await }
    });
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(waiter.await.unwrap(), EndCause::Expired);
    // A cancel that arrives after expiry does not rewrite history (C4).
    b.cancel();
    assert_eq!(b.end_cause(), Some(EndCause::Expired));
    assert_eq!(child.end_cause(), Some(EndCause::Expired));
}

#[tokio::test(start_paused = true)]
async fn cancellation_flows_to_children_with_its_cause() {
    let b = budget(1_000);
    let child = b.child();
    let grandchild = child.child();
    let token = grandchild.token();
    let waiter = tokio::spawn({
        let g = grandchild.clone();
        async move { g.done().await }
    });
    tokio::task::yield_now().await;
    assert!(b.cancel());
    assert_eq!(waiter.await.unwrap(), EndCause::Cancelled);
    assert!(token.is_cancelled());
    assert_eq!(grandchild.end_cause(), Some(EndCause::Cancelled));
    // A child ended on its own does not end the parent.
    let b2 = budget(1_000);
    let c2 = b2.child();
    c2.cancel();
    assert_eq!(b2.end_cause(), None);
}

#[tokio::test(start_paused = true)]
async fn token_created_after_cancel_is_cancelled() {
    let b = budget(1_000);
    let child = b.child();
    b.cancel();
    assert!(child.token().is_cancelled());
    assert_eq!(child.done().await, EndCause::Cancelled);
}

/// [C7](crate::contract#c7): a token first asked for after the deadline is cancelled at once, before any timer
/// task could run; so is an existing token whose timer has not fired yet.
#[tokio::test(start_paused = true)]
async fn token_taken_after_the_deadline_is_already_cancelled() {
    let b = budget(50);
    let child = b.child();
    tokio::time::advance(Duration::from_millis(60)).await;
    assert!(child.token().is_cancelled(), "a child's first token");
    assert!(b.token().is_cancelled(), "the budget's own first token");
    assert_eq!(
        b.end_cause(),
        Some(EndCause::Expired),
        "expiry, not cancellation"
    );
}

#[tokio::test(start_paused = true)]
async fn run_stops_work_at_the_deadline() {
    let b = budget(50);
    let started = tokio::time::Instant::now();
    let r = b.run(tokio::time::sleep(Duration::from_secs(10))).await;
    assert_eq!(r, Err(BudgetError::Expired));
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    assert_eq!(b.run(async { 1 }).await, Err(BudgetError::Expired));
}

#[tokio::test(start_paused = true)]
async fn scope_makes_the_budget_ambient() {
    assert!(RequestBudget::current().is_none());
    let b = budget(100);
    let seen = b.scope(async { RequestBudget::current() }).await.unwrap();
    assert!(seen.ptr_eq(&b));
    let id = b.sync_scope(|| RequestBudget::current().map(|c| c.id()));
    assert_eq!(id, Some(b.id()));
    assert!(RequestBudget::current().is_none());
}

#[tokio::test(start_paused = true)]
async fn detach_is_rooted_at_scheduling_and_survives_the_request() {
    let request = budget(100);
    tokio::time::advance(Duration::from_millis(90)).await;
    let background = request.detach(Duration::from_secs(5));
    assert_eq!(background.source(), Source::Detached);
    assert_eq!(background.linked_from(), Some(request.id()));
    request.cancel();
    tokio::time::advance(Duration::from_millis(200)).await;
    assert!(request.is_done());
    assert!(
        !background.is_done(),
        "background work is not cancelled with its request"
    );
    assert_eq!(background.remaining(), Duration::from_millis(4_800));
}

/// On the real clock, where two reads differ: a budget with no deadline ([C8](crate::contract#c8)) and a
/// detached one ([C12](crate::contract#c12)) start with exactly what they were given (#32, item 11).
#[tokio::test]
async fn fallback_and_detached_budgets_start_with_exactly_their_budget() {
    let fallback = RequestBudget::fallback(Duration::from_millis(1_500), HopPolicy::DEFAULT);
    assert_eq!(fallback.at_arrival(), Duration::from_millis(1_500));
    assert_eq!(fallback.source(), Source::Fallback);
    let detached = fallback.detach(Duration::from_millis(1_500));
    assert_eq!(detached.at_arrival(), Duration::from_millis(1_500));
}

#[tokio::test(start_paused = true)]
async fn child_until_takes_the_tighter_deadline() {
    let b = budget(100);
    let c = b.child_until(Deadline::after(Duration::from_millis(40)));
    assert_eq!(c.remaining(), Duration::from_millis(40));
    let c = b.child_until(Deadline::after(Duration::from_millis(400)));
    assert_eq!(c.remaining(), Duration::from_millis(100));
}

/// [C24](crate::contract#c24): with the kill switch off, nothing ends the budget but a cancel, while its
/// arithmetic (what is left, what to forward) is unchanged.
#[tokio::test(start_paused = true)]
async fn an_unenforced_budget_is_never_ended_by_its_deadline() {
    let off = HopPolicy {
        enforce: false,
        ..HopPolicy::DEFAULT
    };
    let b = RequestBudget::local(Duration::from_millis(50), off);
    let token = b.token();
    let child = b.child();
    let tight = b.child_until(Deadline::after(Duration::from_millis(20)));
    let (child_token, tight_token) = (child.token(), tight.token());
    assert!(
        !child.is_enforced() && !tight.is_enforced(),
        "children inherit it"
    );
    assert!(!b.detach(Duration::from_secs(1)).is_enforced());
    assert_eq!(b.forward(), Duration::from_millis(44));

    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!token.is_cancelled() && !child_token.is_cancelled() && !tight_token.is_cancelled());
    assert_eq!((b.end_cause(), tight.end_cause()), (None, None));
    assert!(!b.is_done());
    assert!(
        !b.token().is_cancelled(),
        "a token taken late is not cancelled either"
    );
    assert_eq!(b.remaining(), Duration::ZERO);
    assert_eq!(b.admit(Duration::from_secs(1)), Ok(()));
    assert_eq!(b.admit_forward(), Ok(Duration::ZERO), "forwarded as spent");
    // `run` does not stop the work; `done` waits for a cancel only.
    let work = tokio::time::sleep(Duration::from_secs(5));
    assert_eq!(b.run(work).await, Ok(()));
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.done().await }
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!waiter.is_finished());
    // The caller going away still ends it (C5), past the deadline as expiry (C4).
    b.cancel();
    assert_eq!(waiter.await.unwrap(), EndCause::Expired);
    assert!(token.is_cancelled() && child_token.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn c7_the_token_fires_at_the_deadline_with_nobody_awaiting() {
    let b = budget(50);
    let token = b.token();
    let child_token = b.child().token();
    tokio::time::sleep(Duration::from_millis(49)).await;
    assert!(!token.is_cancelled());
    tokio::time::sleep(Duration::from_millis(51)).await;
    assert!(
        token.is_cancelled(),
        "a 50 ms budget's token is cancelled by 100 ms"
    );
    assert!(child_token.is_cancelled());
    assert_eq!(b.end_cause(), Some(EndCause::Expired));
    // A tighter child has a timer of its own.
    let b = budget(1_000);
    let c = b.child_until(Deadline::after(Duration::from_millis(20)));
    let t = c.token();
    tokio::time::sleep(Duration::from_millis(21)).await;
    assert!(t.is_cancelled());
    assert!(!b.token().is_cancelled());
}

/// Let the runtime's deadline timer run what is due.
async fn settle() {
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
}

/// How many budgets the current runtime's deadline timer holds (`timer.rs`).
fn timer_entries() -> usize {
    super::timer::stats().0
}

/// How many times the timer's one sleep was moved earlier (`timer.rs`).
fn earlier_moves() -> u64 {
    super::timer::stats().1
}

/// #51 item 1: a budget that ends, however it ends, leaves the shared deadline timer; one
/// dropped unended leaves it at its deadline, having cancelled the token it handed out (C7).
#[tokio::test(start_paused = true)]
async fn finished_budgets_leave_no_timer_behind() {
    let cancelled = budget(60_000);
    let expired = budget(60_000);
    let timed_out = budget(50);
    let dropped = budget(80);
    let tokens = [&cancelled, &expired, &timed_out, &dropped].map(RequestBudget::token);
    // A child sharing its parent's deadline is covered by the parent's entry.
    let _child_token = cancelled.child().token();
    assert_eq!(timer_entries(), 4);
    cancelled.cancel();
    expired.expire();
    assert_eq!(timer_entries(), 2, "an ended budget left its entry");
    drop(dropped);
    tokio::time::sleep(Duration::from_millis(100)).await;
    settle().await;
    assert!(tokens.iter().all(CancellationToken::is_cancelled));
    assert_eq!(timer_entries(), 0, "an entry outlived its deadline");
    // A child ended through its parent goes at its own deadline, still cancelled (C4).
    let parent = budget(60_000);
    let child = parent.child_until(Deadline::after(Duration::from_millis(20)));
    let _token = child.token();
    parent.cancel();
    tokio::time::sleep(Duration::from_millis(30)).await;
    settle().await;
    assert_eq!(timer_entries(), 0);
    assert_eq!(child.end_cause(), Some(EndCause::Cancelled));
}

/// #51 item 1: the shared timer fires a token at its deadline, not a tick before or after.
#[tokio::test(start_paused = true)]
async fn the_timer_fires_at_the_deadline_neither_early_nor_late() {
    let b = budget(50);
    let token = b.token();
    // Another budget with a later deadline does not hold it back, nor an earlier one that
    // ended.
    let later = budget(500);
    let _later_token = later.token();
    let earlier = budget(10);
    let _earlier_token = earlier.token();
    earlier.cancel();
    tokio::time::advance(Duration::from_millis(49)).await;
    settle().await;
    assert!(!token.is_cancelled(), "fired early");
    assert_eq!(b.end_cause(), None);
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert!(token.is_cancelled(), "fired late");
    assert_eq!(b.end_cause(), Some(EndCause::Expired));
    assert!(!later.is_done());
}

/// #51 item 1, C13: a deadline that moved later after the token was handed out fires at the
/// new deadline, neither at the old one nor after the new one.
#[tokio::test(start_paused = true)]
async fn a_timer_moved_later_fires_at_the_new_deadline() {
    let b = budget(100).for_stream();
    let token = b.token();
    tokio::time::advance(Duration::from_millis(50)).await;
    b.start_stream(Duration::from_millis(1_000));
    tokio::time::advance(Duration::from_millis(60)).await;
    settle().await;
    assert!(!token.is_cancelled(), "fired at the old deadline");
    assert_eq!(timer_entries(), 1, "put back at the new deadline");
    tokio::time::advance(Duration::from_millis(939)).await;
    settle().await;
    assert!(!token.is_cancelled(), "fired early");
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert!(token.is_cancelled(), "fired late");
    assert_eq!(b.end_cause(), Some(EndCause::Expired));
    assert_eq!(timer_entries(), 0);
    assert_eq!(earlier_moves(), 0, "a later move is not an earlier one");
}

/// #51 item 1: a deadline that moves earlier (a stream lifetime shorter than what was left)
/// moves the timer earlier, counted; it does not fire at the old deadline.
#[tokio::test(start_paused = true)]
async fn a_timer_moved_earlier_fires_at_the_new_deadline_and_is_counted() {
    let b = budget(1_000).for_stream();
    let token = b.token();
    assert_eq!(earlier_moves(), 0);
    tokio::time::advance(Duration::from_millis(10)).await;
    b.start_stream(Duration::from_millis(20));
    assert_eq!(earlier_moves(), 1);
    tokio::time::advance(Duration::from_millis(19)).await;
    settle().await;
    assert!(!token.is_cancelled(), "fired early");
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert!(token.is_cancelled(), "fired late");
    // A new earliest entry moves it earlier too; a later one does not.
    let first = budget(500);
    let _t = first.token();
    let _t = budget(900).token();
    assert_eq!(earlier_moves(), 1);
    let _t = budget(100).token();
    assert_eq!(earlier_moves(), 2);
}

/// #51 item 1: waits that carry their own timer (`done()`, `run()`) join no timer: only a
/// token handed out does.
#[tokio::test(start_paused = true)]
async fn waits_with_their_own_timer_join_no_timer() {
    let b = budget(50);
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.done().await }
    });
    let ran = b.run(tokio::time::sleep(Duration::from_millis(10))).await;
    assert_eq!(ran, Ok(()));
    settle().await;
    assert_eq!(timer_entries(), 0);
    assert_eq!(waiter.await.unwrap(), EndCause::Expired);
    let b = budget(50);
    let _token = b.child().token();
    assert_eq!(timer_entries(), 1, "a token handed out joins");
}

#[tokio::test(start_paused = true)]
async fn c4_a_child_that_expired_stays_expired_after_its_parent_is_cancelled() {
    let b = budget(1_000);
    let c = b.child_until(Deadline::after(Duration::from_millis(40)));
    tokio::time::advance(Duration::from_millis(100)).await;
    b.cancel();
    assert_eq!(b.end_cause(), Some(EndCause::Cancelled));
    assert_eq!(c.end_cause(), Some(EndCause::Expired));
    // A child whose deadline had not passed when the parent was cancelled is cancelled.
    let b = budget(1_000);
    let c = b.child_until(Deadline::after(Duration::from_millis(400)));
    tokio::time::advance(Duration::from_millis(100)).await;
    b.cancel();
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(c.end_cause(), Some(EndCause::Cancelled));
}

#[tokio::test(start_paused = true)]
async fn c13_a_stream_budget_and_its_children_move_to_the_stream_lifetime() {
    let b = budget(100).for_stream();
    let child = b.child();
    let capped = b.child_until(Deadline::after(Duration::from_millis(300)));
    let token = child.token();
    tokio::time::advance(Duration::from_millis(50)).await;
    b.start_stream(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!token.is_cancelled(), "not cut at the request deadline");
    assert!(child.end_cause().is_none());
    assert_eq!(child.remaining(), Duration::from_millis(9_800));
    assert_eq!(
        capped.remaining(),
        Duration::from_millis(50),
        "own cap stays"
    );
    tokio::time::sleep(Duration::from_millis(9_800)).await;
    tokio::task::yield_now().await;
    assert!(token.is_cancelled(), "ends at the stream lifetime");
    assert_eq!(child.end_cause(), Some(EndCause::Expired));
}

#[test]
fn a_chain_100_000_budgets_deep_needs_no_recursion() {
    // Run on a small stack: recursion per level would overflow it long before the end.
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(async {
                let root = budget(60_000);
                let mut leaf = root.clone();
                for _ in 0..100_000 {
                    leaf = leaf.child();
                }
                assert_eq!(leaf.end_cause(), None);
                let token = leaf.token();
                root.cancel();
                assert!(token.is_cancelled());
                assert_eq!(leaf.end_cause(), Some(EndCause::Cancelled));
                drop(root);
                drop(leaf);
            });
        })
        .unwrap()
        .join()
        .unwrap();
}

/// #51 item 1 across threads: tokens handed out and budgets ended on every worker of a
/// multi-threaded runtime share its one timer, and every ended budget leaves it (counts only,
/// no clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budgets_ended_on_other_threads_leave_the_shared_timer() {
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            tokio::spawn(async move {
                let budgets: Vec<_> = (0..200).map(|_| budget(60_000)).collect();
                let tokens: Vec<_> = budgets.iter().map(RequestBudget::token).collect();
                tokio::task::yield_now().await;
                for (n, b) in budgets.iter().enumerate() {
                    if (n + i) % 2 == 0 {
                        b.cancel();
                    } else {
                        b.expire();
                    }
                }
                assert!(tokens.iter().all(CancellationToken::is_cancelled));
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(timer_entries(), 0, "an ended budget left its entry");
}
