//! Route labels from a bounded set (rule [C20](crate::contract#c20)): metric series and cached keys must not grow
//! with the distinct paths clients send.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// The route label every request shares when its route is not known: a path no router
/// matched, a path no profile rule names, a gRPC method past the cap of distinct methods.
///
/// See the [example](crate::hop#example-a-custom-protocol-adapter).
pub const OTHER_ROUTE: &str = "other";

/// How many distinct gRPC method paths one server labels before the rest share
/// [`OTHER_ROUTE`]. A server has a fixed set of methods; a flood of invented ones must not
/// become a flood of metric series.
pub(crate) const MAX_METHODS: usize = 512;

/// What the adapter knows about the request's route.
///
/// See the [example](crate::hop#example-a-custom-protocol-adapter).
#[derive(Clone, Copy, Debug)]
pub enum RouteLabel<'a> {
    /// A pattern a router matched (axum's `MatchedPath`), bounded by the router's routes,
    /// and the concrete path (a profile rule may name either).
    Matched {
        /// The router's pattern, `/users/{id}`.
        pattern: &'a str,
        /// The request's path, `/users/7`.
        path: &'a str,
    },
    /// A raw path. It is labelled by the profile rule that matches it, else [`OTHER_ROUTE`].
    Path(&'a str),
    /// A gRPC method path `/package.Service/Method`: labelled as itself from its first call
    /// when the server was told its methods (a descriptor set), else once the service has
    /// answered it as a method it has (anything but UNIMPLEMENTED), up to a fixed number of
    /// distinct methods per server; until then [`OTHER_ROUTE`]. Anyone can send any path, so
    /// a path alone earns no label ([C20](crate::contract#c20)).
    Method(&'a str),
    /// A name the adapter already bounds (a queue or subject name from configuration).
    Known(&'a str),
}

/// The gRPC methods a server labels: those it was told it implements (its descriptor set, as
/// many as the file names), and the distinct methods its answers proved, up to
/// [`MAX_METHODS`].
#[derive(Debug)]
pub(crate) struct MethodSet {
    // Fixed before the first request; read without a lock. Shared with a rebuilt copy.
    declared: Arc<HashSet<Arc<str>>>,
    seen: RwLock<HashSet<Arc<str>>>,
    // Names this set in each thread's cache of recently labelled methods.
    id: u64,
}

impl Default for MethodSet {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self {
            declared: Arc::default(),
            seen: RwLock::default(),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// Methods each thread labelled last, per set: a server sees the same few methods over and
/// over, and a short string compare costs less than validating the path, taking the lock
/// and hashing the name on every call.
const RECENT_METHODS: usize = 8;

thread_local! {
    static RECENT: RefCell<Vec<(u64, Arc<str>)>> = const { RefCell::new(Vec::new()) };
}

impl MethodSet {
    /// A set that knows `declared` from the start (the methods of the server's descriptor
    /// set): their calls are labelled from the first, whatever the answer. They do not count
    /// against the cap on methods learned from answers.
    #[cfg(feature = "grpc")]
    pub(crate) fn with_declared(declared: Arc<HashSet<Arc<str>>>) -> Self {
        Self {
            declared,
            ..Self::default()
        }
    }

    /// The methods declared up front.
    #[cfg(feature = "grpc")]
    pub(crate) fn declared(&self) -> &Arc<HashSet<Arc<str>>> {
        &self.declared
    }

    /// `method`'s label if the set knows it: `None` for a method neither declared nor proved
    /// by an answer yet. Never adds: a request's path alone mints no label
    /// ([C20](crate::contract#c20)).
    pub(crate) fn known<'a>(&self, method: &'a str) -> Option<&'a str> {
        let recent = RECENT.try_with(|recent| {
            recent.try_borrow().is_ok_and(|recent| {
                recent
                    .iter()
                    .any(|(id, m)| *id == self.id && **m == *method)
            })
        });
        if recent == Ok(true) {
            return Some(method);
        }
        if let Some(declared) = self.declared.get(method) {
            self.remember(declared.clone());
            return Some(method);
        }
        let known = self
            .seen
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(method)
            .cloned()?;
        self.remember(known);
        Some(method)
    }

    /// The service answered `method` as a method it has: from now on it is its own label,
    /// while there is room. The set's copy of it, or `None` once the set is full (or for a
    /// path that is no method path).
    pub(crate) fn learn(&self, method: &str) -> Option<Arc<str>> {
        if let Some(declared) = self.declared.get(method) {
            return Some(declared.clone());
        }
        let known = self.admit(method)?;
        self.remember(known.clone());
        Some(known)
    }

    /// Put `known` in this thread's cache of recently labelled methods.
    fn remember(&self, known: Arc<str>) {
        let _ = RECENT.try_with(|recent| {
            if let Ok(mut recent) = recent.try_borrow_mut() {
                if recent.len() == RECENT_METHODS {
                    recent.remove(0);
                }
                recent.push((self.id, known));
            }
        });
    }

    /// The set's own copy of `method`, added while there is room; `None` once it is full.
    fn admit(&self, method: &str) -> Option<Arc<str>> {
        if !is_method_path(method) {
            return None;
        }
        {
            let seen = self
                .seen
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(known) = seen.get(method) {
                return Some(known.clone());
            }
            if seen.len() >= MAX_METHODS {
                return None;
            }
        }
        let mut seen = self
            .seen
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(known) = seen.get(method) {
            return Some(known.clone());
        }
        if seen.len() >= MAX_METHODS {
            return None;
        }
        let known: Arc<str> = Arc::from(method);
        seen.insert(known.clone());
        Some(known)
    }
}

/// Whether `path` is shaped like a gRPC method path, `/package.Service/Method`.
pub(crate) fn is_method_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    match rest.split_once('/') {
        Some((service, method)) => {
            !service.is_empty() && !method.is_empty() && !method.contains('/') && path.len() <= 256
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path alone is never a label: only what `learn` was told (the service answered it)
    /// is, up to the cap; after the cap new methods share `other`, the known stay known.
    #[test]
    fn only_learned_methods_are_labelled_up_to_the_cap() {
        let set = MethodSet::default();
        assert_eq!(set.known("/shop.Tax/Quote"), None, "seen is not answered");
        assert_eq!(
            set.known("/shop.Tax/Quote"),
            None,
            "asking twice mints nothing"
        );
        assert!(set.seen.read().unwrap().is_empty());
        assert_eq!(
            set.learn("/shop.Tax/Quote").as_deref(),
            Some("/shop.Tax/Quote")
        );
        assert_eq!(set.known("/shop.Tax/Quote"), Some("/shop.Tax/Quote"));
        assert_eq!(set.learn("not-a-method"), None);
        assert_eq!(set.learn("/a/b/c"), None);
        for i in 0..MAX_METHODS * 2 {
            let m = format!("/x.S/M{i}");
            let learned = set.learn(&m);
            assert_eq!(learned.is_some(), i < MAX_METHODS - 1, "{m}");
            assert_eq!(set.known(&m).is_some(), learned.is_some(), "{m}");
        }
        assert_eq!(set.seen.read().unwrap().len(), MAX_METHODS);
        assert_eq!(
            set.known("/shop.Tax/Quote"),
            Some("/shop.Tax/Quote"),
            "known stays known"
        );
        assert_eq!(set.learn("/x.S/new"), None);
    }

    /// Declared methods are known before any answer, and take no room from the learned ones.
    #[cfg(feature = "grpc")]
    #[test]
    fn declared_methods_are_known_from_the_start_and_leave_the_cap_alone() {
        let declared: HashSet<Arc<str>> = ["/shop.Tax/Quote", "/shop.Tax/Refund"]
            .into_iter()
            .map(Arc::from)
            .collect();
        let set = MethodSet::with_declared(Arc::new(declared));
        assert_eq!(set.known("/shop.Tax/Quote"), Some("/shop.Tax/Quote"));
        assert_eq!(set.known("/shop.Tax/Refund"), Some("/shop.Tax/Refund"));
        assert_eq!(set.known("/shop.Tax/Invented"), None, "not declared");
        assert_eq!(
            set.learn("/shop.Tax/Quote").as_deref(),
            Some("/shop.Tax/Quote")
        );
        assert!(set.seen.read().unwrap().is_empty(), "declared, not learned");
        for i in 0..MAX_METHODS {
            assert!(set.learn(&format!("/x.S/M{i}")).is_some());
        }
        assert_eq!(set.learn("/x.S/past-the-cap"), None);
        assert_eq!(set.known("/shop.Tax/Refund"), Some("/shop.Tax/Refund"));
    }

    #[test]
    fn a_method_known_to_one_set_is_not_known_to_another() {
        // The thread's cache of recent methods is per set: a full set stays full.
        let full = MethodSet::default();
        for i in 0..MAX_METHODS {
            let m = format!("/x.S/M{i}");
            assert_eq!(full.learn(&m).as_deref(), Some(m.as_str()));
        }
        let open = MethodSet::default();
        // Now in this thread's cache, for `open`.
        assert!(open.learn("/shop.Tax/Quote").is_some());
        assert_eq!(full.known("/shop.Tax/Quote"), None);
        assert_eq!(full.learn("/shop.Tax/Quote"), None);
        assert_eq!(open.known("/shop.Tax/Quote"), Some("/shop.Tax/Quote"));
    }
}
