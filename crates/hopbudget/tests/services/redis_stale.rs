//! The read-through cache against a real Redis: recompute when it fits the budget, serve stale
//! when it does not, refuse with nothing to serve, and Redis commands bounded by the budget.
//!
//! Needs Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`). Without it every test here
//! that needs it says how to start it: it fails under `HOPBUDGET_REQUIRE_SERVICES=1` (CI) and
//! is skipped otherwise (`support/services.rs`). Keys are unique per test and process. The
//! tests of a server that stops answering or is gone start a `redis-server` of their own.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hopbudget::cache::CacheChoice;
use hopbudget::redis::{CacheError, StaleCache};
use hopbudget::{BudgetError, HopPolicy, RequestBudget};
use redis::aio::MultiplexedConnection;

fn url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Connect, or say what to start: `None` when the server is missing, and the test, which needs
/// it, returns at once; under `HOPBUDGET_REQUIRE_SERVICES=1` (CI) a missing server fails the
/// test instead.
async fn connect() -> Option<MultiplexedConnection> {
    let connected = match redis::Client::open(url()) {
        Ok(client) => client.get_multiplexed_async_connection().await,
        Err(e) => Err(e),
    };
    match connected {
        Ok(conn) => Some(conn),
        Err(e) => {
            crate::services_support::skip_or_fail(&format!(
                "Redis is not reachable at {} ({e}). Start it with `redis-server --daemonize yes \
                 --bind 127.0.0.1 --port 6379 --save '' --appendonly no`, or point REDIS_URL at one.",
                url()
            ));
            None
        }
    }
}

fn key(name: &str) -> String {
    format!("hopbudget:test:{name}:{}", std::process::id())
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn budget(v: u64) -> RequestBudget {
    RequestBudget::local(ms(v), HopPolicy::DEFAULT)
}

const FRESH: Duration = Duration::from_secs(10);
const STALE: Duration = Duration::from_secs(60);
const RECOMPUTE: Duration = Duration::from_millis(250);

/// The cache on the shared server, and a connection of its own; `None` when the server is
/// missing (see [`connect`]).
async fn cache() -> Option<(StaleCache<MultiplexedConnection>, MultiplexedConnection)> {
    let conn = connect().await?;
    let cache = StaleCache::new(conn.clone(), "catalog", "prices")
        .fresh_for(FRESH)
        .stale_for(STALE);
    Some((cache, conn))
}

/// Put `value` under `key` with `ttl` left, as if written `FRESH + STALE - ttl` ago.
async fn put(conn: &mut MultiplexedConnection, key: &str, value: &str, ttl: Duration) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query_async::<()>(conn)
        .await
        .unwrap();
}

async fn stored(conn: &mut MultiplexedConnection, key: &str) -> (Option<String>, i64) {
    redis::pipe()
        .cmd("GET")
        .arg(key)
        .cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

/// A recompute that counts its calls and answers `value`.
fn counted(
    calls: &Arc<AtomicUsize>,
    value: &'static str,
) -> impl AsyncFnOnce() -> Result<String, std::io::Error> {
    let calls = calls.clone();
    async move || {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(value.to_string())
    }
}

#[tokio::test]
async fn a_miss_is_recomputed_when_it_fits_and_written_back() {
    let Some((cache, mut conn)) = cache().await else {
        return;
    };
    let k = key("miss");
    let _: () = redis::cmd("DEL")
        .arg(&k)
        .query_async(&mut conn)
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let got = cache
        .get(&budget(1_000), &k, RECOMPUTE, counted(&calls, "12.50"))
        .await
        .unwrap();
    assert_eq!(
        (got.value.as_str(), got.choice),
        ("12.50", CacheChoice::Recomputed)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let (value, ttl) = stored(&mut conn, &k).await;
    assert_eq!(value.as_deref(), Some("12.50"));
    let full = (FRESH + STALE).as_millis() as i64;
    assert!(ttl > full - 5_000 && ttl <= full, "ttl {ttl} ms");
}

#[tokio::test]
async fn a_fresh_value_is_served_however_thin_the_budget() {
    let Some((cache, mut conn)) = cache().await else {
        return;
    };
    let k = key("fresh");
    put(&mut conn, &k, "fresh", FRESH + STALE).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let got = cache
        .get(&budget(30), &k, RECOMPUTE, counted(&calls, "new"))
        .await
        .unwrap();
    assert_eq!(
        (got.value.as_str(), got.choice),
        ("fresh", CacheChoice::Fresh)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn stale_is_served_when_the_recompute_cannot_finish_in_the_budget() {
    let Some((cache, mut conn)) = cache().await else {
        return;
    };
    let k = key("stale");
    put(&mut conn, &k, "old", STALE / 2).await; // past its freshness
    let calls = Arc::new(AtomicUsize::new(0));
    let got = cache
        .get(&budget(80), &k, RECOMPUTE, counted(&calls, "new"))
        .await
        .unwrap();
    assert_eq!(
        (got.value.as_str(), got.choice),
        ("old", CacheChoice::Stale)
    );
    assert!(got.is_stale(), "marked stale");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no recompute was started");
    assert_eq!(stored(&mut conn, &k).await.0.as_deref(), Some("old"));
}

#[tokio::test]
async fn stale_is_recomputed_when_the_budget_covers_it() {
    let Some((cache, mut conn)) = cache().await else {
        return;
    };
    let k = key("refresh");
    put(&mut conn, &k, "old", STALE / 2).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let got = cache
        .get(&budget(1_000), &k, RECOMPUTE, counted(&calls, "new"))
        .await
        .unwrap();
    assert_eq!(
        (got.value.as_str(), got.choice),
        ("new", CacheChoice::Recomputed)
    );
    let (value, ttl) = stored(&mut conn, &k).await;
    assert_eq!(value.as_deref(), Some("new"));
    assert!(ttl > STALE.as_millis() as i64, "fresh again: ttl {ttl} ms");
}

#[tokio::test]
async fn a_miss_with_no_time_to_recompute_is_refused_before_any_work() {
    let Some((cache, mut conn)) = cache().await else {
        return;
    };
    let k = key("refused");
    let _: () = redis::cmd("DEL")
        .arg(&k)
        .query_async(&mut conn)
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let err = cache
        .get(&budget(80), &k, RECOMPUTE, counted(&calls, "new"))
        .await
        .unwrap_err();
    match err.budget() {
        Some(BudgetError::Refused(r)) => assert_eq!(r.required(), RECOMPUTE),
        other => panic!("{other:?} from {err}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(stored(&mut conn, &k).await.0, None);
}

#[tokio::test]
async fn a_recompute_that_outlives_the_budget_is_stopped_as_expired() {
    let Some((cache, mut conn)) = cache().await else {
        return;
    };
    let k = key("slow-recompute");
    let _: () = redis::cmd("DEL")
        .arg(&k)
        .query_async(&mut conn)
        .await
        .unwrap();
    let started = Instant::now();
    let err = cache
        .get(&budget(300), &k, ms(50), async || {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, std::io::Error>("late".to_string())
        })
        .await
        .unwrap_err();
    assert_eq!(err.budget(), Some(BudgetError::Expired), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(stored(&mut conn, &k).await.0, None, "nothing written");
}

#[tokio::test]
async fn redis_commands_are_bounded_by_the_budget() {
    // A blocking pop on the cache's own multiplexed connection holds that connection on the
    // server for 5 s: the read's GET queues behind it, and the budget stops the wait.
    let Some(conn) = connect().await else {
        return;
    };
    let cache = StaleCache::new(conn.clone(), "catalog", "prices");
    let mut blocker = conn.clone();
    let list = key("never-pushed");
    let blocked = tokio::spawn(async move {
        redis::cmd("BLPOP")
            .arg(list)
            .arg(5)
            .query_async::<Option<(String, String)>>(&mut blocker)
            .await
    });
    tokio::time::sleep(ms(50)).await;
    let started = Instant::now();
    let result = cache
        .get(&budget(200), &key("bounded"), ms(10), async || {
            Ok::<_, std::io::Error>("v".to_string())
        })
        .await;
    let took = started.elapsed();
    match result {
        Err(CacheError::Budget(BudgetError::Expired)) => {}
        other => panic!("expected expired, got {other:?}"),
    }
    assert!(took < Duration::from_secs(2), "waited {took:?}");
    blocked.abort();
}

/// A Redis server of this test's own, on a free loopback port, so it can be frozen and
/// killed without touching the machine's.
struct OwnRedis {
    child: std::process::Child,
    url: String,
}

impl OwnRedis {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}): install it with `apt-get install redis-server`")
            });
        Self {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        }
    }

    async fn connect(&self) -> MultiplexedConnection {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        for _ in 0..100 {
            if let Ok(c) = client.get_multiplexed_async_connection().await {
                return c;
            }
            tokio::time::sleep(ms(50)).await;
        }
        panic!("the test's own redis-server at {} never answered", self.url);
    }

    fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} failed");
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        // A frozen server cannot die of SIGKILL until it runs again; a dead one ignores both.
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 32 item 10: a Redis server that stops answering (frozen with SIGSTOP: its socket
/// still accepts bytes, nothing comes back) costs a read no more than its budget: it ends
/// `expired` at the deadline instead of hanging, the recompute never runs, and once the
/// server answers again the same cache serves from it.
#[tokio::test]
async fn a_redis_that_stops_answering_costs_no_more_than_the_budget() {
    let server = OwnRedis::start();
    let conn = server.connect().await;
    let cache = StaleCache::new(conn, "catalog", "prices")
        .fresh_for(FRESH)
        .stale_for(STALE);
    let k = key("frozen");
    let calls = Arc::new(AtomicUsize::new(0));
    let warm = cache
        .get(&budget(2_000), &k, RECOMPUTE, counted(&calls, "1"))
        .await
        .unwrap();
    assert_eq!(warm.choice, CacheChoice::Recomputed);

    server.signal("-STOP");
    let started = Instant::now();
    let frozen = cache
        .get(&budget(300), &k, ms(10), counted(&calls, "2"))
        .await;
    let took = started.elapsed();
    match frozen {
        Err(CacheError::Budget(BudgetError::Expired)) => {}
        other => panic!("a frozen Redis must end the read as expired, got {other:?}"),
    }
    assert!(took < Duration::from_secs(3), "the read hung for {took:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no recompute started");

    server.signal("-CONT");
    let back = cache
        .get(&budget(2_000), &k, RECOMPUTE, counted(&calls, "3"))
        .await
        .unwrap();
    assert_eq!(
        (back.value.as_str(), back.choice),
        ("1", CacheChoice::Fresh)
    );
}

/// Issue 32 item 10: a Redis server that is gone fails the read at once with an error that
/// says it is Redis, never a hang until the deadline and never a budget outcome.
#[tokio::test]
async fn a_redis_that_is_gone_fails_the_read_clearly_and_at_once() {
    let mut server = OwnRedis::start();
    let conn = server.connect().await;
    let cache = StaleCache::new(conn, "catalog", "prices");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let started = Instant::now();
    let calls = Arc::new(AtomicUsize::new(0));
    let gone = cache
        .get(&budget(5_000), &key("gone"), ms(10), counted(&calls, "x"))
        .await;
    match &gone {
        Err(e @ CacheError::Redis(_)) => {
            assert!(e.to_string().starts_with("redis: "), "{e}");
        }
        other => panic!("expected a Redis error, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4), "not at once");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
