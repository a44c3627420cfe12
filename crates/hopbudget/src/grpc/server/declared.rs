//! The methods a gRPC server implements, read from the protobuf descriptor set its build
//! already writes for reflection, so that each real method has its own route label from its
//! first call ([C20](crate::contract#c20)).
//!
//! Without them the layer knows a method only once the service has answered it: tonic's
//! router knows service names, not methods, and anyone can send any path. So the first calls
//! of a real method that end before any answer (cancelled, expired) are counted as `other`.
//! A descriptor set names every method of every service in it, and is the operator's file,
//! not the caller's: its methods are labelled at once, and nothing else is.
//!
//! A descriptor set is a `google.protobuf.FileDescriptorSet`, as `protoc --descriptor_set_out`
//! and tonic-build's `file_descriptor_set_path` write (with protox: encode what
//! `protox::compile` returns).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use prost::Message;
use prost_types::FileDescriptorSet;

/// The gRPC methods of the services a descriptor set defines, as method paths
/// (`/package.Service/Method`). Give them to
/// [`GrpcServerLayer::with_methods`](super::GrpcServerLayer::with_methods).
///
/// # Examples
///
/// A descriptor set built in place; a server reads its own with [`read`](Self::read), or
/// embeds it with `tonic::include_file_descriptor_set!`.
///
/// ```
/// use hopbudget::grpc::server::{DeclaredMethods, GrpcServerLayer};
/// use hopbudget::Profile;
/// use prost::Message;
/// use prost_types::{FileDescriptorProto, FileDescriptorSet, MethodDescriptorProto, ServiceDescriptorProto};
///
/// let set = FileDescriptorSet {
///     file: vec![FileDescriptorProto {
///         name: Some("shop/tax.proto".into()),
///         package: Some("shop".into()),
///         service: vec![ServiceDescriptorProto {
///             name: Some("Tax".into()),
///             method: vec![MethodDescriptorProto {
///                 name: Some("Quote".into()),
///                 ..Default::default()
///             }],
///             ..Default::default()
///         }],
///         ..Default::default()
///     }],
/// };
/// let methods = DeclaredMethods::from_descriptor_set(&set.encode_to_vec()).unwrap();
/// assert_eq!(methods.iter().collect::<Vec<_>>(), ["/shop.Tax/Quote"]);
/// let layer = GrpcServerLayer::new(Profile::default()).with_methods(&methods);
///
/// // Anything else is named as what it is not.
/// let err = DeclaredMethods::from_descriptor_set(b"service: checkout\n").unwrap_err();
/// assert!(err.to_string().contains("not a protobuf descriptor set"), "{err}");
/// ```
#[derive(Clone, Debug, Default)]
pub struct DeclaredMethods {
    paths: BTreeSet<Arc<str>>,
}

impl DeclaredMethods {
    /// The methods of the descriptor set in the file at `path`.
    ///
    /// # Errors
    /// The file cannot be read, is not a descriptor set, or defines no service; the error
    /// names the file.
    ///
    /// See the [example](Self#examples).
    pub fn read(path: impl AsRef<Path>) -> Result<Self, DescriptorSetError> {
        let path = path.as_ref();
        let origin = format!("`{}`", path.display());
        let bytes = std::fs::read(path).map_err(|error| DescriptorSetError {
            message: format!("cannot read the descriptor set {origin}: {error}"),
        })?;
        Self::decode(&bytes, &origin)
    }

    /// The methods of an encoded descriptor set (what `tonic::include_file_descriptor_set!`
    /// gives).
    ///
    /// # Errors
    /// The bytes are not a descriptor set, or it defines no service.
    ///
    /// See the [example](Self#examples).
    pub fn from_descriptor_set(bytes: &[u8]) -> Result<Self, DescriptorSetError> {
        Self::decode(bytes, "the bytes given")
    }

    /// Add the methods of `other` (a server built from several descriptor sets).
    ///
    /// See the [example](Self#examples).
    pub fn merge(&mut self, other: DeclaredMethods) {
        self.paths.extend(other.paths);
    }

    /// The method paths, in order.
    ///
    /// See the [example](Self#examples).
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.paths.iter().map(|path| &**path)
    }

    /// How many methods.
    ///
    /// See the [example](Self#examples).
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// No methods (only [`Default`] makes such a set: a descriptor set must define some).
    ///
    /// See the [example](Self#examples).
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The method paths, shared, for the layer's label set.
    pub(super) fn shared(&self) -> impl Iterator<Item = Arc<str>> + '_ {
        self.paths.iter().cloned()
    }

    fn decode(bytes: &[u8], origin: &str) -> Result<Self, DescriptorSetError> {
        let not_a_set = |why: String| DescriptorSetError {
            message: format!(
                "{origin} is not a protobuf descriptor set (a FileDescriptorSet, as `protoc \
                 --descriptor_set_out` or tonic-build's `file_descriptor_set_path` writes): {why}"
            ),
        };
        let set = FileDescriptorSet::decode(bytes).map_err(|e| not_a_set(e.to_string()))?;
        // Protobuf decoding is lenient (an empty input is an empty set, unknown fields are
        // skipped): a real descriptor set names its files and spells its names as protobuf
        // does, and anything else is not taken for one.
        if set.file.is_empty() {
            return Err(not_a_set("it describes no .proto file".into()));
        }
        let mut paths = BTreeSet::new();
        for file in &set.file {
            let name = file.name();
            if name.is_empty() || name.contains(char::is_control) {
                return Err(not_a_set(format!("a file has no usable name ({name:?})")));
            }
            let package = file.package();
            if !package.is_empty() && !package.split('.').all(is_identifier) {
                return Err(not_a_set(format!(
                    "`{name}` has a package that is not one: {package:?}"
                )));
            }
            for service in &file.service {
                let service_name = service.name();
                if !is_identifier(service_name) {
                    return Err(not_a_set(format!(
                        "`{name}` has a service whose name is not one: {service_name:?}"
                    )));
                }
                for method in &service.method {
                    let method_name = method.name();
                    if !is_identifier(method_name) {
                        return Err(not_a_set(format!(
                            "`{name}` has a method of `{service_name}` whose name is not one: \
                             {method_name:?}"
                        )));
                    }
                    let path = if package.is_empty() {
                        format!("/{service_name}/{method_name}")
                    } else {
                        format!("/{package}.{service_name}/{method_name}")
                    };
                    paths.insert(Arc::from(path));
                }
            }
        }
        if paths.is_empty() {
            return Err(DescriptorSetError {
                message: format!(
                    "the descriptor set {origin} defines no gRPC method: give the one built \
                     from the .proto files that define the server's services"
                ),
            });
        }
        Ok(Self { paths })
    }
}

/// A protobuf identifier: a letter or `_`, then letters, digits and `_`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A descriptor set that could not be read or is no descriptor set; the message names the
/// file (or says the bytes given) and what was wrong.
///
/// See the [example](DeclaredMethods#examples).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DescriptorSetError {
    message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::{FileDescriptorProto, MethodDescriptorProto, ServiceDescriptorProto};

    fn file(name: &str, package: &str, services: &[(&str, &[&str])]) -> FileDescriptorProto {
        FileDescriptorProto {
            name: Some(name.into()),
            package: (!package.is_empty()).then(|| package.into()),
            service: services
                .iter()
                .map(|(service, methods)| ServiceDescriptorProto {
                    name: Some((*service).into()),
                    method: methods
                        .iter()
                        .map(|m| MethodDescriptorProto {
                            name: Some((*m).into()),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn encode(files: Vec<FileDescriptorProto>) -> Vec<u8> {
        FileDescriptorSet { file: files }.encode_to_vec()
    }

    #[test]
    fn every_method_of_every_service_is_a_path() {
        let bytes = encode(vec![
            file("a.proto", "shop.v1", &[("Tax", &["Quote", "Refund"])]),
            file("b.proto", "", &[("Health", &["Check"])]),
            file("messages.proto", "shop.v1", &[]),
        ]);
        let methods = DeclaredMethods::from_descriptor_set(&bytes).unwrap();
        assert_eq!(
            methods.iter().collect::<Vec<_>>(),
            ["/Health/Check", "/shop.v1.Tax/Quote", "/shop.v1.Tax/Refund"]
        );
    }

    #[test]
    fn what_is_no_descriptor_set_is_refused_with_the_reason() {
        let refused = |bytes: &[u8]| {
            DeclaredMethods::from_descriptor_set(bytes)
                .unwrap_err()
                .to_string()
        };
        assert!(refused(b"").contains("no .proto file"));
        assert!(refused(b"service: checkout\nroutes: []\n").contains("not a protobuf"));
        assert!(refused(&[0x0a, 0x05, b'a']).contains("not a protobuf"));
        let unnamed = encode(vec![file("", "x", &[("S", &["M"])])]);
        assert!(refused(&unnamed).contains("no usable name"));
        let slash = encode(vec![file("a.proto", "x", &[("S", &["M/N"])])]);
        assert!(refused(&slash).contains("\"M/N\""), "{}", refused(&slash));
        let messages_only = encode(vec![file("a.proto", "x", &[])]);
        assert!(refused(&messages_only).contains("defines no gRPC method"));
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = DeclaredMethods::read("/nonexistent/shop.binpb").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`/nonexistent/shop.binpb`"), "{text}");
        assert!(text.contains("cannot read"), "{text}");
    }
}
