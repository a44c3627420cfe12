//! Recording the metrics through the `metrics` facade. Keys for a service and route are built
//! once per [`HopLabels`] (shared by its clones) and handed to whatever recorder is current, so
//! a hop allocates nothing for its metrics, and with no recorder installed each update is a
//! thread-local check and a no-op call. The server layers' own routes also hold the handles
//! the recorder gave for their keys (`held`), so a request asks the recorder for nothing.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use metrics::{Counter, Histogram, Key, Label, Recorder};

use super::held::{Held, RecorderId};
use super::{
    ARRIVALS_TOTAL, BUDGET_USED_RATIO, CACHE_READS_TOTAL, DEADLINE_MISSING_TOTAL, DEGRADED_TOTAL,
    HOP_DURATION_MS, HOPS_TOTAL, LATE_WORK_OVERRUN_MS, LATE_WORK_TOTAL, LOW_BUDGET_ARRIVALS_TOTAL,
    MALFORMED_HEADERS_TOTAL, METADATA, QUEUE_EXPIRED_TOTAL, REFUSED_BEFORE_WORK_TOTAL,
    REMAINING_AT_ARRIVAL_MS, UNENFORCED_TOTAL,
};
use crate::budget::Source;
use crate::observe::HopLabels;
use crate::outcome::Outcome;

/// The keys of one service and route: shared for the life of the process (the common case:
/// no reference counting per hop), or owned once the shared table is full.
#[derive(Clone, Debug)]
pub(crate) enum Keys {
    Shared(&'static KeyCache),
    Owned(Arc<KeyCache>),
}

impl std::ops::Deref for Keys {
    type Target = KeyCache;

    fn deref(&self) -> &KeyCache {
        match self {
            Keys::Shared(k) => k,
            Keys::Owned(k) => k,
        }
    }
}

/// Metric keys for one service and route, built on first use, and, for a layer's own routes
/// ([`LayerKeys`](super::layer_keys::LayerKeys)), the handles the recorder gave for them.
#[derive(Debug)]
pub(crate) struct KeyCache {
    service: Arc<str>,
    route: Arc<str>,
    arrivals: OnceLock<Key>,
    remaining: OnceLock<Key>,
    missing: OnceLock<Key>,
    low: OnceLock<Key>,
    refused: OnceLock<Key>,
    late: OnceLock<Key>,
    overrun: OnceLock<Key>,
    used: OnceLock<Key>,
    hops: [OnceLock<Key>; 4],
    durations: [OnceLock<Key>; 4],
    // Boxed: the process-wide entries, up to `MAX_SHARED` of them, hold none.
    held: Option<Box<Handles>>,
}

/// The handles of one route's series, each resolved on its first use.
#[derive(Debug)]
struct Handles {
    arrivals: Held<Counter>,
    remaining: Held<Histogram>,
    missing: Held<Counter>,
    low: Held<Counter>,
    refused: Held<Counter>,
    late: Held<Counter>,
    overrun: Held<Histogram>,
    used: Held<Histogram>,
    hops: [Held<Counter>; 4],
    durations: [Held<Histogram>; 4],
}

impl KeyCache {
    pub(crate) fn new(service: &Arc<str>, route: &Arc<str>) -> Self {
        Self {
            service: service.clone(),
            route: route.clone(),
            arrivals: OnceLock::new(),
            remaining: OnceLock::new(),
            missing: OnceLock::new(),
            low: OnceLock::new(),
            refused: OnceLock::new(),
            late: OnceLock::new(),
            overrun: OnceLock::new(),
            used: OnceLock::new(),
            hops: [const { OnceLock::new() }; 4],
            durations: [const { OnceLock::new() }; 4],
            held: None,
        }
    }

    /// Keys whose handles are held once resolved: a layer's own, never the process-wide
    /// table's (see `held`).
    pub(crate) fn held(service: &Arc<str>, route: &Arc<str>) -> Self {
        Self {
            held: Some(Box::new(Handles {
                arrivals: Held::new(),
                remaining: Held::new(),
                missing: Held::new(),
                low: Held::new(),
                refused: Held::new(),
                late: Held::new(),
                overrun: Held::new(),
                used: Held::new(),
                hops: [const { Held::new() }; 4],
                durations: [const { Held::new() }; 4],
            })),
            ..Self::new(service, route)
        }
    }

    pub(crate) fn service(&self) -> &Arc<str> {
        &self.service
    }

    pub(crate) fn route(&self) -> &Arc<str> {
        &self.route
    }

    /// The shared keys of `service` and `route`, allocating only for a pair not seen before.
    pub(crate) fn lookup(service: &Arc<str>, route: &str) -> Keys {
        shared(service, Route::Borrowed(route))
    }

    fn matches(&self, labels: &HopLabels) -> bool {
        (Arc::ptr_eq(&self.service, &labels.service) || *self.service == *labels.service)
            && (Arc::ptr_eq(&self.route, &labels.route) || *self.route == *labels.route)
    }

    /// The keys of `labels`' service and route: the ones `labels` was built with
    /// ([`HopLabels::for_route`]), else the process-wide shared ones.
    pub(crate) fn of(labels: &HopLabels) -> Keys {
        match labels.keys.as_ref() {
            Some(keys) if keys.matches(labels) => keys.clone(),
            // The public `service` or `route` changed after the keys were remembered.
            Some(_) => shared(&labels.service, Route::Owned(&labels.route)),
            // Built with `HopLabels::new`: look the keys up in the process-wide table.
            None => shared(&labels.service, Route::Owned(&labels.route)),
        }
    }

    fn labels(&self) -> Vec<Label> {
        vec![
            Label::new("service", self.service.clone()),
            Label::new("route", self.route.clone()),
        ]
    }

    fn route_key<'a>(&'a self, name: &'static str, slot: &'a OnceLock<Key>) -> &'a Key {
        slot.get_or_init(|| Key::from_parts(name, self.labels()))
    }

    fn hops_key(&self, outcome: Outcome) -> &Key {
        self.outcome_key(HOPS_TOTAL, &self.hops, outcome)
    }

    fn duration_key(&self, outcome: Outcome) -> &Key {
        self.outcome_key(HOP_DURATION_MS, &self.durations, outcome)
    }

    fn outcome_key<'a>(
        &'a self,
        name: &'static str,
        slots: &'a [OnceLock<Key>; 4],
        outcome: Outcome,
    ) -> &'a Key {
        slots[outcome_index(outcome)].get_or_init(|| {
            let mut labels = self.labels();
            labels.push(Label::from_static_parts("outcome", outcome.as_str()));
            Key::from_parts(name, labels)
        })
    }
}

const fn outcome_index(outcome: Outcome) -> usize {
    match outcome {
        Outcome::Completed => 0,
        Outcome::Refused => 1,
        Outcome::Expired => 2,
        Outcome::Cancelled => 3,
    }
}

/// Beyond this many service/route pairs, keys are built per `HopLabels` instead of shared, so
/// a caller that puts raw paths in `route` cannot grow the table without bound.
const MAX_SHARED: usize = 10_000;

/// How many service/route pairs each thread remembers in front of the shared table, which
/// costs a lock and two hashes per lookup.
const THREAD_CACHE: usize = 16;

/// A route to look up: owned when the caller already has an `Arc`, borrowed otherwise (an
/// `Arc` is made only when a new entry needs one).
#[derive(Clone, Copy)]
enum Route<'a> {
    Owned(&'a Arc<str>),
    Borrowed(&'a str),
}

impl Route<'_> {
    fn as_str(&self) -> &str {
        match self {
            Route::Owned(r) => r,
            Route::Borrowed(r) => r,
        }
    }

    fn to_arc(self) -> Arc<str> {
        match self {
            Route::Owned(r) => r.clone(),
            Route::Borrowed(r) => Arc::from(r),
        }
    }
}

fn shared(service: &Arc<str>, route: Route<'_>) -> Keys {
    thread_local! {
        static RECENT: std::cell::RefCell<Vec<&'static KeyCache>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    let hit = RECENT.try_with(|recent| {
        let recent = recent.try_borrow().ok()?;
        recent
            .iter()
            .find(|k| *k.route == *route.as_str() && *k.service == **service)
            .copied()
    });
    if let Ok(Some(keys)) = hit {
        return Keys::Shared(keys);
    }
    let keys = shared_table(service, route);
    if let Keys::Shared(keys) = keys {
        let _ = RECENT.try_with(|recent| {
            if let Ok(mut recent) = recent.try_borrow_mut() {
                if recent.len() == THREAD_CACHE {
                    recent.remove(0);
                }
                recent.push(keys);
            }
        });
    }
    keys
}

type Shared = HashMap<Arc<str>, HashMap<Arc<str>, &'static KeyCache>>;

fn shared_table(service: &Arc<str>, route: Route<'_>) -> Keys {
    static SHARED: OnceLock<RwLock<(Shared, usize)>> = OnceLock::new();
    let table = SHARED.get_or_init(Default::default);
    let find = |map: &Shared| {
        map.get(&**service)
            .and_then(|r| r.get(route.as_str()))
            .copied()
    };
    if let Some(keys) = table.read().ok().and_then(|g| find(&g.0)) {
        return Keys::Shared(keys);
    }
    let route = route.to_arc();
    let owned = || Keys::Owned(Arc::new(KeyCache::new(service, &route)));
    let Ok(mut guard) = table.write() else {
        return owned();
    };
    let (map, len) = &mut *guard;
    if let Some(keys) = find(map) {
        return Keys::Shared(keys);
    }
    if *len >= MAX_SHARED {
        return owned();
    }
    // Leaked on purpose: an entry lives as long as the table, which lives as long as the
    // process, and a `&'static` costs a hop no reference counting.
    let keys: &'static KeyCache = Box::leak(Box::new(KeyCache::new(service, &route)));
    map.entry(service.clone()).or_default().insert(route, keys);
    *len += 1;
    Keys::Shared(keys)
}

fn increment(r: &dyn Recorder, key: &Key) {
    r.register_counter(key, &METADATA).increment(1);
}

fn observe(r: &dyn Recorder, key: &Key, value: f64) {
    r.register_histogram(key, &METADATA).record(value);
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// One `with_recorder` per event, not per metric: each call is a thread-local and a global
// lookup, which is most of the cost when no recorder is installed.
pub(crate) fn record_arrival(
    keys: &KeyCache,
    low_budget: Duration,
    remaining: Duration,
    source: Source,
) {
    metrics::with_recorder(|r| {
        let arrivals = || keys.route_key(ARRIVALS_TOTAL, &keys.arrivals);
        let left = || keys.route_key(REMAINING_AT_ARRIVAL_MS, &keys.remaining);
        let missing = || keys.route_key(DEADLINE_MISSING_TOTAL, &keys.missing);
        let low = || keys.route_key(LOW_BUDGET_ARRIVALS_TOTAL, &keys.low);
        let id = RecorderId::of(r);
        let Some(held) = keys.held.as_deref().filter(|_| id.holds()) else {
            increment(r, arrivals());
            observe(r, left(), millis(remaining));
            if source == Source::Fallback {
                increment(r, missing());
            }
            if remaining < low_budget {
                increment(r, low());
            }
            return;
        };
        held.arrivals.increment(r, id, arrivals);
        held.remaining.record(r, id, left, millis(remaining));
        if source == Source::Fallback {
            held.missing.increment(r, id, missing);
        }
        if remaining < low_budget {
            held.low.increment(r, id, low);
        }
    });
}

/// The end of a hop: its outcome, how long it took (`took`) and the budget it arrived with
/// (`budget`), whose share used is recorded unless the hop arrived with none.
pub(crate) fn record_end(keys: &KeyCache, outcome: Outcome, took: Duration, budget: Duration) {
    let used_ratio = (!budget.is_zero()).then(|| took.as_secs_f64() / budget.as_secs_f64());
    metrics::with_recorder(|r| {
        let refused = || keys.route_key(REFUSED_BEFORE_WORK_TOTAL, &keys.refused);
        let hops = || keys.hops_key(outcome);
        let duration = || keys.duration_key(outcome);
        let used = || keys.route_key(BUDGET_USED_RATIO, &keys.used);
        let id = RecorderId::of(r);
        let Some(held) = keys.held.as_deref().filter(|_| id.holds()) else {
            if outcome == Outcome::Refused {
                increment(r, refused());
            }
            increment(r, hops());
            observe(r, duration(), millis(took));
            if let Some(ratio) = used_ratio {
                observe(r, used(), ratio);
            }
            return;
        };
        if outcome == Outcome::Refused {
            held.refused.increment(r, id, refused);
        }
        held.hops[outcome_index(outcome)].increment(r, id, hops);
        held.durations[outcome_index(outcome)].record(r, id, duration, millis(took));
        if let Some(ratio) = used_ratio {
            held.used.record(r, id, used, ratio);
        }
    });
}

pub(crate) fn record_unenforced(keys: &KeyCache, would: &'static str) {
    // Only while enforcement is off, so the key is built each time rather than cached.
    let key = Key::from_parts(
        UNENFORCED_TOTAL,
        vec![
            Label::new("service", keys.service.to_string()),
            Label::new("route", keys.route.to_string()),
            Label::new("would", would),
        ],
    );
    metrics::with_recorder(|r| increment(r, &key));
}

pub(crate) fn record_late(keys: &KeyCache, overrun: Duration) {
    metrics::with_recorder(|r| {
        let late = || keys.route_key(LATE_WORK_TOTAL, &keys.late);
        let by = || keys.route_key(LATE_WORK_OVERRUN_MS, &keys.overrun);
        let id = RecorderId::of(r);
        match keys.held.as_deref().filter(|_| id.holds()) {
            Some(held) => {
                held.late.increment(r, id, late);
                held.overrun.record(r, id, by, millis(overrun));
            }
            None => {
                increment(r, late());
                observe(r, by(), millis(overrun));
            }
        }
    });
}

pub(crate) fn record_malformed(labels: &HopLabels, header: &str) {
    let key = Key::from_parts(
        MALFORMED_HEADERS_TOTAL,
        vec![
            Label::new("service", labels.service.clone()),
            Label::new("route", labels.route.clone()),
            Label::new("header", header.to_owned()),
        ],
    );
    metrics::with_recorder(|r| increment(r, &key));
}

pub(crate) fn record_queue_expired(service: &str, queue: &str) {
    let key = Key::from_parts(
        QUEUE_EXPIRED_TOTAL,
        vec![
            Label::new("service", service.to_owned()),
            Label::new("queue", queue.to_owned()),
        ],
    );
    metrics::with_recorder(|r| increment(r, &key));
}

/// The key of `hopbudget_degraded_total` for one degradation point, built once by its owner.
pub(crate) fn degraded_key(service: &str, route: &str, path: &str) -> Key {
    Key::from_parts(
        DEGRADED_TOTAL,
        vec![
            Label::new("service", service.to_owned()),
            Label::new("route", route.to_owned()),
            Label::new("path", path.to_owned()),
        ],
    )
}

/// The key of `hopbudget_cache_reads_total` for one cache and choice, built once by its owner.
pub(crate) fn cache_read_key(service: &str, cache: &str, choice: &'static str) -> Key {
    Key::from_parts(
        CACHE_READS_TOTAL,
        vec![
            Label::new("service", service.to_owned()),
            Label::new("cache", cache.to_owned()),
            Label::from_static_parts("choice", choice),
        ],
    )
}

/// Add one to the counter `key` on the current recorder.
pub(crate) fn count(key: &Key) {
    metrics::with_recorder(|r| increment(r, key));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Protocol;

    #[test]
    fn keys_are_shared_until_the_table_is_full_then_owned() {
        let service: Arc<str> = "cap-test".into();
        let first = KeyCache::lookup(&service, "/r/0");
        let again = KeyCache::lookup(&service, &String::from("/r/0"));
        match (&first, &again) {
            (Keys::Shared(a), Keys::Shared(b)) => assert!(std::ptr::eq(*a, *b)),
            other => panic!("expected shared keys, got {other:?}"),
        }
        // Fill the table: a caller putting raw paths in `route` stops being shared.
        let mut owned = 0;
        for i in 1..=MAX_SHARED + 5 {
            if let Keys::Owned(_) = KeyCache::lookup(&service, &format!("/r/{i}")) {
                owned += 1;
            }
        }
        assert!(owned >= 5, "{owned}");
        // A pair already shared stays shared.
        assert!(matches!(
            KeyCache::lookup(&service, "/r/0"),
            Keys::Shared(_)
        ));
    }

    #[test]
    fn changed_public_fields_get_their_own_keys() {
        let labels = HopLabels::for_route(&"svc".into(), "/a", Protocol::Http);
        assert_eq!(&*KeyCache::of(&labels).route, "/a");
        let mut moved = labels.clone();
        moved.route = "/b".into();
        assert_eq!(&*KeyCache::of(&moved).route, "/b");
        assert_eq!(&*KeyCache::of(&labels).route, "/a");
    }
}
