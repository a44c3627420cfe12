//! Metric handles held, not looked up (#51). A recorder hands out a handle for a key
//! (`register_counter`); asking it again on every request costs a hash and a table lookup in
//! the recorder, for the same handle each time. So a layer resolves the handle of each of its
//! series once and keeps it, as linkerd2-proxy builds a target's metrics with its service.
//!
//! Handles belong to the recorder that made them, and the `metrics` facade picks the recorder
//! per call (a thread's local one, else the global one). A held handle is used only while the
//! current recorder is the one it came from, told apart by address; under any other recorder
//! the key is registered per call, as without holding. A recorder of no size (the facade's
//! no-op recorder, a stateless test recorder) has no address worth the name, and nothing to
//! gain: its handles are never held.
//!
//! Handles are held per layer (`layer_keys`), not process-wide: a layer lives as long as the
//! recorder it reports to, while a process-wide table would outlive a test's local recorder
//! and meet the next one at the same address.

use std::sync::OnceLock;

use metrics::{Counter, Histogram, Key, Recorder};

use super::METADATA;

/// One series' handle, resolved from the first recorder that records it, and that
/// recorder's address.
#[derive(Debug)]
pub(in crate::observe) struct Held<H> {
    slot: OnceLock<(usize, H)>,
}

impl<H> Held<H> {
    pub(in crate::observe) const fn new() -> Self {
        Self {
            slot: OnceLock::new(),
        }
    }

    /// The handle for the recorder `r`, whose [`RecorderId`] is `id`: the one held when `r`
    /// made it, else `register`'s, kept when nothing is held yet.
    #[inline]
    fn with<T>(
        &self,
        r: &dyn Recorder,
        id: RecorderId,
        register: impl FnOnce(&dyn Recorder) -> H,
        use_it: impl FnOnce(&H) -> T,
    ) -> T {
        let Some(id) = id.0 else {
            return use_it(&register(r));
        };
        match self.slot.get() {
            Some((held_by, handle)) if *held_by == id => use_it(handle),
            // Another recorder than the one the handle came from: look up, keep nothing.
            Some(_) => use_it(&register(r)),
            None => {
                let handle = register(r);
                let out = use_it(&handle);
                let _ = self.slot.set((id, handle));
                out
            }
        }
    }
}

impl Held<Counter> {
    /// Add one to the series `key` names, on `r`.
    #[inline]
    pub(in crate::observe) fn increment<'k>(
        &self,
        r: &dyn Recorder,
        id: RecorderId,
        key: impl FnOnce() -> &'k Key,
    ) {
        self.with(
            r,
            id,
            |r| r.register_counter(key(), &METADATA),
            |c| c.increment(1),
        );
    }
}

impl Held<Histogram> {
    /// Record `value` in the series `key` names, on `r`.
    #[inline]
    pub(in crate::observe) fn record<'k>(
        &self,
        r: &dyn Recorder,
        id: RecorderId,
        key: impl FnOnce() -> &'k Key,
        value: f64,
    ) {
        self.with(
            r,
            id,
            |r| r.register_histogram(key(), &METADATA),
            |h| h.record(value),
        );
    }
}

/// Which recorder one is: its address, or nothing for a recorder of no size. Read once per
/// event, for all the series it updates.
#[derive(Clone, Copy)]
pub(in crate::observe) struct RecorderId(Option<usize>);

impl RecorderId {
    #[inline]
    pub(in crate::observe) fn of(r: &dyn Recorder) -> Self {
        Self((std::mem::size_of_val(r) != 0).then(|| std::ptr::from_ref(r).cast::<()>() as usize))
    }

    /// Whether handles from this recorder can be held at all.
    #[inline]
    pub(in crate::observe) fn holds(self) -> bool {
        self.0.is_some()
    }
}
