//! A topology file's text into a [`Topology`](super::Topology), with every error naming the
//! file and the field path, as the adoption profile's errors do.
//!
//! The library reads its profiles the same way (`hopbudget::config`), but keeps that reader
//! private: a general YAML loader is not a deadline library's business, and making it public
//! would freeze its error wording and its empty-file rule into the library's semver. So the
//! demo holds its own copy and shares only the error types ([`ConfigError`], [`Issue`]).

use std::path::Path;

use hopbudget::config::{ConfigError, Issue};
use serde::de::DeserializeOwned;

/// A configuration file's text; a file that cannot be read is a `(file)` problem.
pub(super) fn read_file(kind: &'static str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigError::one(
            kind,
            path,
            Issue::new("(file)", format!("cannot read: {e}")),
        )
    })
}

/// YAML text into `T`, every problem naming the file, the field path and the reason. Parsed
/// to a generic tree first, so a structural error (an unknown field, a wrong type) can name
/// the path it is at. Empty text (or only comments) parses as an empty mapping.
pub(super) fn parse_yaml<T: DeserializeOwned>(
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
