//! The profile reloaded without a restart (issue #46 item 5, C24): on `SIGHUP`, and when the
//! file's content changes. The content is hashed every `--profile-poll` seconds rather than
//! watched by modification time or inotify, because Kubernetes updates a ConfigMap volume by
//! swapping a symlink: the path's content changes while no event names the file.
//!
//! A new profile that does not validate is not taken: the one in force stays, the reason is
//! logged at WARN naming the file and field, and it is counted. Requests in flight keep the
//! profile they started with (the layers read it once per request); routes the new profile
//! names get their own metric series on their first request.
//!
//! `hopbudget_proxy_profile_hash` is the low 32 bits of the loaded file's FNV-1a hash, so an
//! operator sees that a reload took (the value changes) and which sidecars run the same file;
//! `hopbudget_proxy_profile_reloads_total{result}` counts `loaded` and `invalid` reloads.

use std::path::PathBuf;
use std::time::Duration;

use hopbudget::{Profile, SharedProfile};

/// Reloads by result: `loaded`, `invalid`.
pub(crate) const RELOADS_TOTAL: &str = "hopbudget_proxy_profile_reloads_total";
/// The loaded profile file's hash (low 32 bits of FNV-1a).
pub(crate) const PROFILE_HASH: &str = "hopbudget_proxy_profile_hash";

/// A profile file, as the proxy reads it.
#[derive(Debug)]
pub(crate) struct ProfileFile {
    pub(crate) path: PathBuf,
    /// `--no-hop-log`: otherwise the proxy turns the profile's hop line on.
    pub(crate) no_hop_log: bool,
}

impl ProfileFile {
    /// Read and validate the file: the profile, with the proxy's own setting applied, and the
    /// hash of the content it came from.
    pub(crate) fn load(&self) -> Result<(Profile, u64), String> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read the profile {}: {e}", self.path.display()))?;
        let profile = Profile::from_yaml(&text, &self.path).map_err(|e| e.to_string())?;
        Ok((
            with_hop_line(profile, self.no_hop_log)?,
            fnv1a(text.as_bytes()),
        ))
    }

    /// Reload on `SIGHUP`, and whenever the content's hash is not `loaded`'s, checked every
    /// `poll`; for as long as the returned task runs.
    pub(crate) fn watch(
        self,
        shared: SharedProfile,
        mut loaded: u64,
        poll: Duration,
    ) -> tokio::task::JoinHandle<()> {
        set_hash(loaded);
        #[cfg(unix)]
        let mut hangups =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                #[cfg(unix)]
                let forced = match hangups.as_mut() {
                    Some(h) => tokio::select! {
                        _ = h.recv() => true,
                        _ = tick.tick() => false,
                    },
                    None => {
                        tick.tick().await;
                        false
                    }
                };
                #[cfg(not(unix))]
                let forced = {
                    tick.tick().await;
                    false
                };
                if let Some(hash) = self.reload(&shared, loaded, forced) {
                    loaded = hash;
                }
            }
        })
    }

    /// One check: the new hash when a profile was put in force.
    fn reload(&self, shared: &SharedProfile, loaded: u64, forced: bool) -> Option<u64> {
        if !forced {
            // Unchanged content is not parsed again; an unreadable file is reported below.
            if let Ok(bytes) = std::fs::read(&self.path) {
                if fnv1a(&bytes) == loaded {
                    return None;
                }
            }
        }
        match self.load() {
            Ok((profile, hash)) => {
                shared.replace(profile);
                set_hash(hash);
                metrics::counter!(RELOADS_TOTAL, "result" => "loaded").increment(1);
                Some(hash)
            }
            Err(error) => {
                metrics::counter!(RELOADS_TOTAL, "result" => "invalid").increment(1);
                tracing::warn!(
                    file = %self.path.display(),
                    %error,
                    "profile reload refused; the profile in force stays"
                );
                // Not again every poll for the same bad content: its hash counts as seen.
                std::fs::read(&self.path).ok().map(|b| fnv1a(&b))
            }
        }
    }
}

/// A sidecar's log is its hops: one line each unless `--no-hop-log`.
pub(crate) fn with_hop_line(profile: Profile, no_hop_log: bool) -> Result<Profile, String> {
    if no_hop_log || profile.spec().log.hops {
        return Ok(profile);
    }
    let mut spec = profile.spec().clone();
    spec.log.hops = true;
    Profile::from_spec(spec).map_err(|issues| format!("{issues:?}"))
}

fn set_hash(hash: u64) {
    metrics::gauge!(PROFILE_HASH).set((hash & 0xffff_ffff) as f64);
}

/// FNV-1a, 64 bits: stable across builds and platforms, which a metric compared between
/// sidecars needs.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fnv1a() {
        // The published test vectors of FNV-1a 64.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
