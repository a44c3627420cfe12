//! A profile that can be replaced while the service runs, and the kill switch (rule
//! [C24](crate::contract#c24)).
//!
//! During a rollout a threshold can turn out wrong. Backing out must not need a deploy: the
//! operator hands the running service a new profile (from code, or by editing the file and
//! sending `SIGHUP`), or turns enforcement off, and the next request follows it. A profile
//! that does not validate is never taken: the old one stays, and the reason is logged and
//! returned.
//!
//! Every layer built from one [`SharedProfile`] reads the current profile once per request,
//! when the request arrives, and that request keeps it to its end: a swap never changes the
//! rules under a request already admitted.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::config::ConfigError;
use crate::profile::Profile;

/// A cloneable handle on the profile the layers follow, which can be replaced at run time (rule
/// [C24](crate::contract#c24)). Every clone sees the same profile; hand one to each layer and keep
/// one to swap with.
///
/// A layer built with a plain [`Profile`] gets a handle of its own (`From<Profile>`); build
/// the layers from a `SharedProfile` to be able to swap.
///
/// The service name a layer labels its hops with is the one of the profile it was built
/// with: metric series are keyed by it, so a new name takes effect at the next start.
///
/// # Examples
///
/// ```
/// use hopbudget::{Profile, SharedProfile};
/// use hopbudget::http::server::ServerBudgetLayer;
///
/// let shared = SharedProfile::new(Profile::from_yaml("service: checkout\nrefuse_below_ms: 50", "p.yaml")?);
/// let layer = ServerBudgetLayer::new(shared.clone()); // follows whatever `shared` holds
///
/// // The kill switch: stop refusing and ending work at the deadline; budgets are still
/// // forwarded and every hop recorded.
/// shared.set_enforcing(false);
/// assert!(!layer.profile().enforces());
///
/// // A new profile from code...
/// shared.replace(Profile::from_yaml("service: checkout\nrefuse_below_ms: 20", "p.yaml")?);
/// assert_eq!(layer.profile().policy().refuse_below.as_millis(), 20);
/// assert!(layer.profile().enforces());
///
/// // ...or from its file. One that does not validate is not taken, and says why.
/// let dir = std::env::temp_dir().join(format!("hopbudget-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let file = dir.join("checkout.yaml");
/// std::fs::write(&file, "service: checkout\nrefuse_below_ms: -5\n")?;
/// let err = shared.reload(&file).unwrap_err();
/// assert_eq!(err.issues[0].field, "refuse_below_ms");
/// assert_eq!(layer.profile().policy().refuse_below.as_millis(), 20, "the old profile stays");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct SharedProfile {
    current: Arc<RwLock<Arc<Profile>>>,
}

impl fmt::Debug for SharedProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let current = self.current();
        f.debug_struct("SharedProfile")
            .field("service", &current.service())
            .field("enforce", &current.enforces())
            .finish_non_exhaustive()
    }
}

impl Default for SharedProfile {
    fn default() -> Self {
        Self::new(Profile::default())
    }
}

impl From<Profile> for SharedProfile {
    fn from(profile: Profile) -> Self {
        Self::new(profile)
    }
}

/// A handle of its own holding a copy of `profile`.
impl From<&Profile> for SharedProfile {
    fn from(profile: &Profile) -> Self {
        Self::new(profile.clone())
    }
}

/// Another handle on the same profile.
impl From<&SharedProfile> for SharedProfile {
    fn from(shared: &SharedProfile) -> Self {
        shared.clone()
    }
}

impl SharedProfile {
    /// A handle holding `profile`.
    ///
    /// See the [example](Self#examples).
    pub fn new(profile: Profile) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(profile))),
        }
    }

    /// The profile in force now. A layer reads it once per request.
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn current(&self) -> Arc<Profile> {
        // Nothing panics while the lock is held (a clone of an `Arc`, or a store of one), so
        // a poisoned lock still holds a whole profile.
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Put `profile` in force for every request that arrives from now on; requests already
    /// admitted keep the profile they arrived under. Returns the profile it replaced.
    ///
    /// See the [example](Self#examples).
    pub fn replace(&self, profile: Profile) -> Arc<Profile> {
        let new = Arc::new(profile);
        let old = std::mem::replace(
            &mut *self
                .current
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            new.clone(),
        );
        if old.service() != new.service() {
            tracing::warn!(
                target: "hopbudget::profile",
                running = old.service(),
                new = new.service(),
                "the new profile names another service; layers keep labelling hops with the name they were built with until the next start"
            );
        }
        tracing::info!(
            target: "hopbudget::profile",
            service = new.service(),
            enforce = new.enforces(),
            "profile replaced"
        );
        old
    }

    /// Load the profile file at `path` and put it in force. A file that cannot be read or
    /// does not validate is not taken: the profile in force stays, the reason is logged at
    /// WARN (target `hopbudget::profile`) and returned, naming the file and each field.
    ///
    /// See the [example](Self#examples).
    pub fn reload(&self, path: impl AsRef<Path>) -> Result<Arc<Profile>, ConfigError> {
        let path = path.as_ref();
        match Profile::load(path) {
            Ok(profile) => {
                self.replace(profile);
                Ok(self.current())
            }
            Err(err) => {
                tracing::warn!(
                    target: "hopbudget::profile",
                    file = %path.display(),
                    error = %err,
                    "profile reload refused; the profile in force stays"
                );
                Err(err)
            }
        }
    }

    /// The kill switch (rule [C24](crate::contract#c24)): `false` stops refusing and ending work at
    /// the deadline, while budgets are still read, forwarded and recorded; `true` enforces again.
    /// The rest of the profile in force is kept.
    ///
    /// See the [example](Self#examples).
    pub fn set_enforcing(&self, enforce: bool) {
        let mut spec = self.current().spec().clone();
        if spec.enforce == enforce {
            return;
        }
        spec.enforce = enforce;
        match Profile::from_spec(spec) {
            Ok(profile) => {
                self.replace(profile);
            }
            // The spec validated when it was put in force, and `enforce` has no rule of its
            // own; say so rather than panic if that ever changes.
            Err(issues) => tracing::error!(
                target: "hopbudget::profile",
                ?issues,
                "the kill switch could not be applied; the profile in force stays"
            ),
        }
    }

    /// Reload the profile from `path` each time the process receives `SIGHUP`, as nginx and
    /// Envoy's hot restart do, for as long as the returned task runs. A reload that fails
    /// keeps the profile in force (see [`reload`](Self::reload)). Needs a tokio runtime.
    ///
    /// ```no_run
    /// # async fn run() -> std::io::Result<()> {
    /// let shared = hopbudget::SharedProfile::new(hopbudget::Profile::load("profile.yaml").unwrap());
    /// let _reloader = shared.reload_on_sighup("profile.yaml")?;
    /// // `kill -HUP <pid>` after editing profile.yaml puts it in force.
    /// # Ok(()) }
    /// ```
    #[cfg(unix)]
    pub fn reload_on_sighup(
        &self,
        path: impl Into<std::path::PathBuf>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        use tokio::signal::unix::{SignalKind, signal};
        let path = path.into();
        // Registered before returning, so a SIGHUP sent once this returns is never missed.
        let mut hangups = signal(SignalKind::hangup())?;
        let shared = self.clone();
        Ok(tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                // `reload` logs either way.
                let _ = shared.reload(&path);
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_keeps_the_rest_of_the_profile() {
        let shared = SharedProfile::new(
            Profile::from_yaml("service: tax\nrefuse_below_ms: 70\n", "t.yaml").unwrap(),
        );
        shared.set_enforcing(false);
        let now = shared.current();
        assert!(!now.enforces());
        assert!(!now.policy().enforce, "budgets made from it are unenforced");
        assert_eq!(now.policy().refuse_below.as_millis(), 70);
        assert_eq!(now.service(), "tax");
        shared.set_enforcing(true);
        assert!(shared.current().enforces());
    }

    #[test]
    fn a_file_that_cannot_be_read_keeps_the_profile_and_names_the_file() {
        let shared = SharedProfile::default();
        let before = shared.current();
        let err = shared.reload("/nonexistent/hopbudget.yaml").unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/hopbudget.yaml"),
            "{err}"
        );
        assert!(Arc::ptr_eq(&before, &shared.current()));
    }
}
