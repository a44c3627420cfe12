//! Reading YAML configuration files with errors a person can act on: every problem names the
//! file, the field (as a path, `status.http.expired`, `routes[2].path`) and the reason.
//!
//! The adoption profile reports its problems as a [`ConfigError`]; so can anything else that is
//! configured from YAML: [`read_file`] and [`parse_yaml`] read any `serde` type the way the
//! profile is read (the demo's topology files use them), and [`ConfigError::one`] and
//! [`Issue::new`] add the problems a semantic check finds. Parsing goes through a generic tree
//! first so that a structural error (an unknown field, a wrong type) can name the field path it
//! is at.
//!
//! See the examples on [`ConfigError`] and [`parse_yaml`].
//!
//! Guide: *The adoption profile*, `docs/guide/profile.md` in the repository.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// One problem with a configuration file.
///
/// See the [example](ConfigError#examples).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// The field, as a path (`status.http.expired`, `routes[2].path`).
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Issue {
    /// A problem with `field`.
    ///
    /// See the [example](ConfigError#examples).
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// A rejected configuration file: every problem found, with the file it came from.
///
/// # Examples
///
/// ```
/// use hopbudget::Profile;
/// use hopbudget::config::{ConfigError, Issue};
///
/// // What `Profile::from_yaml` returns for a bad profile: every problem, by field.
/// let err: ConfigError = Profile::from_yaml("max_ms: -1\n", "profiles/bad.yaml").unwrap_err();
/// assert_eq!((err.kind, err.issues[0].field.as_str()), ("profile", "max_ms"));
/// assert!(err.to_string().starts_with("invalid profile profiles/bad.yaml: 1 problem"));
///
/// // Another YAML-configured tool reports its own problems the same way.
/// let err = ConfigError::one("topology", "demo.yaml", Issue::new("services[2].port", "already used"));
/// assert_eq!(
///     err.to_string(),
///     "invalid topology demo.yaml: 1 problem\n  demo.yaml: field `services[2].port`: already used"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// What kind of file this is, for the message (`profile`, `topology`).
    pub kind: &'static str,
    /// The file, or a name such as `<inline>` for text that came from elsewhere.
    pub origin: PathBuf,
    /// The problems, in field order.
    pub issues: Vec<Issue>,
}

impl ConfigError {
    /// An error with one problem.
    ///
    /// See the [example](ConfigError#examples).
    pub fn one(kind: &'static str, origin: impl Into<PathBuf>, issue: Issue) -> Self {
        Self {
            kind,
            origin: origin.into(),
            issues: vec![issue],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.issues.len();
        write!(
            f,
            "invalid {} {}: {n} problem{}",
            self.kind,
            self.origin.display(),
            if n == 1 { "" } else { "s" }
        )?;
        for issue in &self.issues {
            write!(
                f,
                "\n  {}: field `{}`: {}",
                self.origin.display(),
                issue.field,
                issue.reason
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Read a configuration file's text; a file that cannot be read is a `(file)` problem of a
/// [`ConfigError`] of this `kind`, naming the file and the reason.
///
/// # Examples
///
/// ```
/// use std::path::Path;
///
/// let err = hopbudget::config::read_file("topology", Path::new("/nonexistent/demo.yaml")).unwrap_err();
/// assert_eq!((err.kind, err.issues[0].field.as_str()), ("topology", "(file)"));
/// assert!(err.issues[0].reason.starts_with("cannot read: "));
/// ```
pub fn read_file(kind: &'static str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigError::one(
            kind,
            path,
            Issue::new("(file)", format!("cannot read: {e}")),
        )
    })
}

/// Parse YAML text into `T`, every problem a [`ConfigError`] of this `kind` naming `origin`,
/// the field path and the reason: `(yaml)` for text that is not YAML, `(top level)` for a
/// document of the wrong shape. Empty text (or only comments) parses as an empty mapping, so a
/// type whose fields all have defaults accepts it.
///
/// The wording of these errors is for people; match on [`Issue::field`], not on the text.
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use hopbudget::config::parse_yaml;
///
/// #[derive(Debug, serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Service {
///     port: u16,
/// }
///
/// let ok: Service = parse_yaml("service", "port: 8080\n", Path::new("svc.yaml")).unwrap();
/// assert_eq!(ok.port, 8080);
///
/// let err = parse_yaml::<Service>("service", "port: many\n", Path::new("svc.yaml")).unwrap_err();
/// assert_eq!(err.issues[0].field, "port");
/// assert!(err.to_string().starts_with("invalid service svc.yaml: 1 problem"));
/// ```
pub fn parse_yaml<T: DeserializeOwned>(
    kind: &'static str,
    text: &str,
    origin: &Path,
) -> Result<T, ConfigError> {
    let fail =
        |field: String, reason: String| ConfigError::one(kind, origin, Issue::new(field, reason));
    let tree: serde_json::Value = if text.trim().is_empty() {
        serde_json::Value::Object(Default::default())
    } else {
        serde_saphyr::from_str(text).map_err(|e| {
            let message = e.to_string();
            fail(
                "(yaml)".into(),
                message.lines().next().unwrap_or_default().trim().to_owned(),
            )
        })?
    };
    let tree = if tree.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        tree
    };
    serde_path_to_error::deserialize(tree).map_err(|e| {
        let path = e.path().to_string();
        fail(
            if path == "." {
                "(top level)".into()
            } else {
                path
            },
            e.into_inner().to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        #[allow(dead_code)]
        port: u16,
    }

    #[test]
    fn errors_name_file_field_and_reason() {
        let err = parse_yaml::<Doc>("thing", "port: many\n", Path::new("x.yaml")).unwrap_err();
        assert_eq!(err.issues[0].field, "port");
        let text = err.to_string();
        assert!(
            text.starts_with("invalid thing x.yaml: 1 problem"),
            "{text}"
        );
        let err = parse_yaml::<Doc>("thing", "a: [\n", Path::new("x.yaml")).unwrap_err();
        assert_eq!(err.issues[0].field, "(yaml)");
        let err = read_file("thing", Path::new("/nonexistent/x.yaml")).unwrap_err();
        assert_eq!(err.issues[0].field, "(file)");
    }
}
