//! After the load: the chain drains, and the live task count returns to where it was.

use std::time::Duration;

use super::chain::Chain;

/// How the chain drained.
pub(super) struct Drain {
    /// Every hop future ended.
    pub(super) idle: bool,
    /// Live tokio tasks came back to `tasks_before`.
    pub(super) tasks_back: bool,
    /// Live tasks before the load.
    pub(super) tasks_before: usize,
    /// Live tasks after the drain.
    pub(super) tasks_after: usize,
}

/// Wait for every hop future to end (30 s at most); then, with the load generator's `client`
/// dropped so its idle connections close, for the live tasks to come back to `tasks_before`
/// (20 s at most).
pub(super) async fn drain(chain: &Chain, client: reqwest::Client, tasks_before: usize) -> Drain {
    let idle = wait_until(Duration::from_secs(30), || chain.idle()).await;
    drop(client);
    let tasks_back = wait_until(Duration::from_secs(20), || alive_tasks() <= tasks_before).await;
    Drain {
        idle,
        tasks_back,
        tasks_before,
        tasks_after: alive_tasks(),
    }
}

/// Live tasks on this runtime (tokio's stable metrics do not count timers).
pub(super) fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Poll `cond` every 50 ms until it holds or `limit` passes.
async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}
