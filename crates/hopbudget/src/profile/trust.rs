//! Which outbound destinations may see deadline headers (rule [C19](crate::contract#c19), scenario
//! [S16](crate::contract#s16)).
//!
//! A deadline header tells the callee how long the caller will wait, and `x-deadline-*` markers
//! describe this system's internals: neither is for a third party. The profile's
//! `outbound.trusted_hosts` lists the hosts that get them; a call to any other host still has its
//! wait bounded by the budget ([C2](crate::contract#c2), [C3](crate::contract#c3) apply locally)
//! but carries no deadline header. The default trusts what is internal by construction (loopback,
//! private addresses, names without a dot, cluster-local suffixes), so existing deployments keep
//! propagating while a call to a public-looking name such as `api.stripe.com` is clean unless
//! listed.

use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};

/// What a client layer does with a call that names no destination host
/// (`outbound.unknown_destination`, rule [C19](crate::contract#c19)).
///
/// The trust decision is made on the hosts a call names: the destination given when the
/// layer was built (`GrpcClientLayer::destination`, the endpoint of a tonic channel), the
/// request URI's host, the `Host` header. A tonic-generated client names none of them: its
/// requests carry only the method path (`/pkg.Svc/Method`), and the channel adds the endpoint's
/// authority *below* every layer stacked on it. Such a call's destination cannot be known
/// from where the layer sits.
///
/// The default is [`Trusted`](Self::Trusted), and this is deliberate. gRPC itself sends
/// `grpc-timeout` to every peer (grpc-go, grpc-java and tonic's own `set_timeout` do), a channel
/// built without naming a destination is the common internal case, and rule
/// [C11](crate::contract#c11) makes keeping the deadline the default: an internal channel keeps
/// working without extra code. A channel to a third party is named, with
/// `GrpcClientLayer::destination` (then the profile's `trusted_hosts` decides) or `untrusted()`. A
/// deployment that prefers hygiene first sets `unknown_destination: untrusted`: then a call sends
/// deadline headers only to a destination it names and the profile trusts.
///
/// ```
/// use hopbudget::Profile;
/// use hopbudget::profile::UnknownDestination;
///
/// assert_eq!(Profile::default().spec().outbound.unknown_destination, UnknownDestination::Trusted);
/// let strict = Profile::from_yaml("outbound: {unknown_destination: untrusted}", "strict.yaml").unwrap();
/// assert_eq!(strict.spec().outbound.unknown_destination, UnknownDestination::Untrusted);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnknownDestination {
    /// Deadline headers go out (gRPC's own behaviour; [C11](crate::contract#c11)).
    #[default]
    Trusted,
    /// No deadline header goes out; the wait is still bounded.
    Untrusted,
}

/// Keyword: 127.0.0.0/8, `::1`, `localhost` and `*.localhost`.
pub(super) const LOOPBACK: &str = "loopback";
/// Keyword: private and link-local addresses (10/8, 172.16/12, 192.168/16, 169.254/16,
/// 100.64/10, fc00::/7, fe80::/10).
pub(super) const PRIVATE: &str = "private";
/// Keyword: a host name with no dot (`payments`, a Kubernetes short service name).
pub(super) const SINGLE_LABEL: &str = "single-label";

/// The built-in `outbound.trusted_hosts`.
pub(super) fn default_patterns() -> Vec<String> {
    [
        LOOPBACK,
        PRIVATE,
        SINGLE_LABEL,
        "*.internal",
        "*.local",
        "*.svc",
        "*.cluster.local",
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    Any,
    Loopback,
    Private,
    SingleLabel,
    /// `*.suffix`, stored as `.suffix`, lower case.
    Suffix(String),
    /// One host name or IP literal, lower case, without IPv6 brackets.
    Exact(String),
}

/// The resolved trusted-host patterns of a profile.
///
/// # Examples
///
/// ```
/// use hopbudget::Profile;
/// use hopbudget::profile::TrustedHosts;
///
/// // The default: internal hosts only (loopback, private addresses, single-label names,
/// // `*.internal`, `*.local`, `*.svc`, `*.cluster.local`).
/// let trusted = Profile::default().trusted_hosts().clone();
/// assert!(trusted.allows("orders.svc") && trusted.allows("10.0.3.7") && trusted.allows("[::1]"));
/// assert!(!trusted.allows("api.stripe.com"));
///
/// let mine = TrustedHosts::parse(&["loopback".into(), "*.corp.example".into()]).unwrap();
/// assert!(mine.allows("billing.corp.example") && !mine.allows("10.0.3.7"));
/// assert_eq!(TrustedHosts::parse(&["*.".into()]).unwrap_err().0, 0); // index of the bad one
/// assert!(TrustedHosts::all().allows("api.stripe.com"));
/// assert!(!TrustedHosts::none().allows("localhost"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedHosts {
    patterns: Vec<Pattern>,
}

impl Default for TrustedHosts {
    fn default() -> Self {
        Self::parse(&default_patterns()).unwrap_or_else(|_| Self {
            patterns: vec![Pattern::Loopback],
        })
    }
}

impl TrustedHosts {
    /// Every host is trusted (the pattern `*`).
    ///
    /// See the [example](TrustedHosts#examples).
    pub fn all() -> Self {
        Self {
            patterns: vec![Pattern::Any],
        }
    }

    /// No host is trusted: nothing outbound carries a deadline header.
    ///
    /// See the [example](TrustedHosts#examples).
    pub fn none() -> Self {
        Self {
            patterns: Vec::new(),
        }
    }

    /// Parse patterns: `*`, the keywords `loopback`, `private`, `single-label`, a suffix
    /// `*.example.internal`, or one exact host name or IP address. Fails with the index and
    /// the reason of the first bad pattern.
    ///
    /// See the [example](TrustedHosts#examples).
    pub fn parse(patterns: &[String]) -> Result<Self, (usize, String)> {
        let mut out = Vec::with_capacity(patterns.len());
        for (i, raw) in patterns.iter().enumerate() {
            out.push(parse_one(raw).map_err(|reason| (i, reason))?);
        }
        Ok(Self { patterns: out })
    }

    /// Whether `host` (as in a URI: a name, an IPv4 address or a bracketed IPv6 address) may
    /// receive deadline headers.
    ///
    /// See the [example](TrustedHosts#examples).
    pub fn allows(&self, host: &str) -> bool {
        self.matching(host).is_some()
    }

    /// The metric label of a call to `host` (`callee` on
    /// `hopbudget_deadline_missing_total{route="(outbound)"}`): the pattern that trusts it, as
    /// the profile lists it (an exact host's name, `*.svc`, `private`, `loopback`, `*`), or
    /// `None` for a host it does not trust. One label per pattern, however many hosts it
    /// covers, so the label's values are bounded by the profile ([C20](crate::contract#c20)).
    ///
    /// ```
    /// use hopbudget::profile::TrustedHosts;
    ///
    /// let trusted = TrustedHosts::parse(&["billing.corp".into(), "*.svc".into(), "private".into()]).unwrap();
    /// assert_eq!(trusted.callee_label("Billing.corp").as_deref(), Some("billing.corp"));
    /// assert_eq!(trusted.callee_label("orders.svc").as_deref(), Some("*.svc"));
    /// assert_eq!(trusted.callee_label("10.0.3.7").as_deref(), Some("private"));
    /// assert_eq!(trusted.callee_label("api.stripe.com"), None);
    /// ```
    pub fn callee_label(&self, host: &str) -> Option<String> {
        Some(match self.matching(host)? {
            Pattern::Any => "*".to_owned(),
            Pattern::Loopback => LOOPBACK.to_owned(),
            Pattern::Private => PRIVATE.to_owned(),
            Pattern::SingleLabel => SINGLE_LABEL.to_owned(),
            Pattern::Suffix(suffix) => format!("*{suffix}"),
            Pattern::Exact(name) => name.clone(),
        })
    }

    /// The first pattern that trusts `host`.
    fn matching(&self, host: &str) -> Option<&Pattern> {
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .trim_end_matches('.');
        // Only something that starts like an address is parsed as one (no allocation here:
        // this runs on every outbound call).
        let ip = host
            .bytes()
            .next()
            .filter(|b| b.is_ascii_digit() || *b == b':')
            .and_then(|_| host.parse::<IpAddr>().ok());
        self.patterns.iter().find(|p| match p {
            Pattern::Any => true,
            Pattern::Loopback => match ip {
                Some(ip) => ip.is_loopback(),
                None => {
                    host.eq_ignore_ascii_case("localhost")
                        || ends_with_ignore_case(host, ".localhost")
                }
            },
            Pattern::Private => ip.is_some_and(is_private),
            Pattern::SingleLabel => ip.is_none() && !host.is_empty() && !host.contains('.'),
            Pattern::Suffix(suffix) => ip.is_none() && ends_with_ignore_case(host, suffix),
            Pattern::Exact(exact) => exact.eq_ignore_ascii_case(host),
        })
    }
}

fn ends_with_ignore_case(host: &str, suffix: &str) -> bool {
    host.len() >= suffix.len()
        && host.as_bytes()[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

fn parse_one(raw: &str) -> Result<Pattern, String> {
    let p = raw.trim().to_ascii_lowercase();
    if p.is_empty() {
        return Err("empty pattern".into());
    }
    match p.as_str() {
        "*" => return Ok(Pattern::Any),
        LOOPBACK => return Ok(Pattern::Loopback),
        PRIVATE => return Ok(Pattern::Private),
        SINGLE_LABEL => return Ok(Pattern::SingleLabel),
        _ => {}
    }
    let (suffix, name) = match p.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, p.as_str()),
    };
    let name = name
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(name);
    if name.parse::<IpAddr>().is_ok() {
        if suffix {
            return Err(format!(
                "`{raw}`: a `*.` suffix needs a name, not an address"
            ));
        }
        return Ok(Pattern::Exact(name.to_owned()));
    }
    let valid = !name.is_empty()
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !valid {
        return Err(format!(
            "`{raw}` is not `*`, `{LOOPBACK}`, `{PRIVATE}`, `{SINGLE_LABEL}`, `*.suffix`, a host name or an IP address"
        ));
    }
    Ok(if suffix {
        Pattern::Suffix(format!(".{name}"))
    } else {
        Pattern::Exact(name.to_owned())
    })
}

fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private() || v4.is_link_local() || in_cgnat(v4) || v4.is_loopback(),
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || v6.is_loopback()
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| is_private(IpAddr::V4(v4)))
        }
    }
}

fn in_cgnat(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    a == 100 && (64..128).contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(p: &[&str]) -> TrustedHosts {
        TrustedHosts::parse(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn the_default_trusts_internal_hosts_and_not_public_names() {
        let t = TrustedHosts::default();
        for host in [
            "127.0.0.1",
            "[::1]",
            "localhost",
            "10.1.2.3",
            "172.20.0.5",
            "192.168.1.9",
            "[fd00::1]",
            "payments",
            "tax.internal",
            "db.svc.cluster.local",
            "tax.prod.svc",
            "printer.local",
        ] {
            assert!(t.allows(host), "{host} should be trusted by default");
        }
        for host in [
            "api.stripe.com",
            "8.8.8.8",
            "[2001:4860::8888]",
            "example.org",
            "172.32.0.1",
        ] {
            assert!(
                !t.allows(host),
                "{host} must not be trusted by default (S16)"
            );
        }
    }

    #[test]
    fn listed_patterns_replace_the_default() {
        let t = hosts(&["*.corp.example", "api.partner.com", "10.0.0.7"]);
        assert!(t.allows("a.corp.example"));
        assert!(t.allows("API.Partner.com"));
        assert!(t.allows("10.0.0.7"));
        assert!(!t.allows("corp.example"), "`*.x` needs a label before x");
        assert!(
            !t.allows("127.0.0.1"),
            "loopback is trusted only when listed"
        );
        assert!(!t.allows("payments"));
        assert!(hosts(&["*"]).allows("api.stripe.com"));
        assert!(!TrustedHosts::none().allows("127.0.0.1"));
    }

    #[test]
    fn bad_patterns_are_named() {
        for bad in ["", "a*b", "*.", "*.10.0.0.1", "has space", "x..y"] {
            let err = TrustedHosts::parse(&[bad.to_string()]).unwrap_err();
            assert_eq!(err.0, 0, "{bad}");
        }
    }
}
