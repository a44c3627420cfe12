//! The series of one layer's routes, each with its handles held (`held`): one table
//! per layer, bounded, with a per-thread cache of the routes used last in front of it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::record::{KeyCache, Keys};
use crate::observe::labels::OTHER_ROUTE;

/// How many routes one layer holds handles for. Route labels are a bounded set already
/// ([C20](crate::contract#c20): matched routes, the profile's routes, known methods,
/// `other`); past this, a route's keys come from the process-wide table and its handles are
/// looked up per request, so memory stays bounded whatever the labels.
pub(in crate::observe) const MAX_HELD_ROUTES: usize = 1024;

/// The series of one layer's routes, each with its handles held: one per layer, shared by
/// every clone of its service and every request.
#[derive(Debug)]
pub(in crate::observe) struct LayerKeys {
    // Names this layer in each thread's cache of its recently used routes.
    id: u64,
    service: Arc<str>,
    // The label of every request no route names (`other`), the common one behind a plain
    // hyper service: found without taking the lock.
    other: Arc<KeyCache>,
    routes: RwLock<Vec<Arc<KeyCache>>>,
}

impl LayerKeys {
    /// The series of `service`'s routes, none resolved yet.
    pub(in crate::observe) fn new(service: &Arc<str>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            service: service.clone(),
            other: Arc::new(KeyCache::held(service, &Arc::from(OTHER_ROUTE))),
            routes: RwLock::new(Vec::new()),
        }
    }

    /// The keys, with their held handles, of `route`: made on its first request.
    #[inline]
    pub(in crate::observe) fn route(&self, route: &str) -> Keys {
        if route == OTHER_ROUTE {
            return Keys::Owned(self.other.clone());
        }
        let recent = RECENT.try_with(|recent| {
            let recent = recent.try_borrow().ok()?;
            recent
                .iter()
                .find(|(id, k)| *id == self.id && same(k.route(), route))
                .map(|(_, k)| Keys::Owned(k.clone()))
        });
        if let Ok(Some(keys)) = recent {
            return keys;
        }
        let keys = self.named(route);
        if let Keys::Owned(held) = &keys {
            let _ = RECENT.try_with(|recent| {
                if let Ok(mut recent) = recent.try_borrow_mut() {
                    if recent.len() == RECENT_ROUTES {
                        recent.remove(0);
                    }
                    recent.push((self.id, held.clone()));
                }
            });
        }
        keys
    }

    /// `route`'s entry from the layer's table, made if there is room.
    fn named(&self, route: &str) -> Keys {
        let found = |routes: &[Arc<KeyCache>]| {
            routes
                .iter()
                .find(|k| same(k.route(), route))
                .map(|k| Keys::Owned(k.clone()))
        };
        if let Some(keys) = self.routes.read().ok().and_then(|r| found(&r)) {
            return keys;
        }
        let Ok(mut routes) = self.routes.write() else {
            return KeyCache::lookup(&self.service, route);
        };
        if let Some(keys) = found(&routes) {
            return keys;
        }
        if routes.len() >= MAX_HELD_ROUTES {
            return KeyCache::lookup(&self.service, route);
        }
        // The process-wide entry's strings, when it has them, so the route is stored once.
        let shared = KeyCache::lookup(&self.service, route);
        let keys = Arc::new(KeyCache::held(shared.service(), shared.route()));
        routes.push(keys.clone());
        Keys::Owned(keys)
    }

    /// How many routes hold handles (tests).
    #[cfg(test)]
    pub(in crate::observe) fn len(&self) -> usize {
        self.routes.read().map_or(0, |r| r.len())
    }
}

/// How many routes each thread remembers in front of the layers' tables, which cost a lock
/// per lookup: a server sees the same few routes over and over.
const RECENT_ROUTES: usize = 16;

thread_local! {
    static RECENT: RefCell<Vec<(u64, Arc<KeyCache>)>> = const { RefCell::new(Vec::new()) };
}

/// `held` names `route`: a pointer compare first, as a label is most often the very string
/// it was made from (`other`, a router's pattern).
#[inline]
fn same(held: &str, route: &str) -> bool {
    std::ptr::eq(held, route) || held == route
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_holds_one_entry_per_route_up_to_its_bound() {
        let layer = LayerKeys::new(&"held-test".into());
        let a = layer.route("/a");
        let again = layer.route(&String::from("/a"));
        match (&a, &again) {
            (Keys::Owned(x), Keys::Owned(y)) => assert!(Arc::ptr_eq(x, y)),
            other => panic!("expected held keys, got {other:?}"),
        }
        for i in 0..MAX_HELD_ROUTES + 3 {
            layer.route(&format!("/r/{i}"));
        }
        assert_eq!(layer.len(), MAX_HELD_ROUTES, "bounded (C20)");
        // Past the bound: the process-wide keys, handles looked up per request.
        layer.route("/past");
        assert_eq!(layer.len(), MAX_HELD_ROUTES, "nothing held past the bound");
    }
}
