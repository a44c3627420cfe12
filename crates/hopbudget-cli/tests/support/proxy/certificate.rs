//! A self-signed certificate made in the test (rcgen), written as PEM for the proxy and for
//! the clients and services that must trust it; the files go with it.

use std::path::PathBuf;

/// `cert.pem` and `key.pem` in a directory of their own, removed when dropped.
pub struct Certificate {
    pub dir: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Certificate {
    /// A certificate for `name` (a DNS name, or an IP address as a SAN), in a directory named
    /// after `tag` and this process.
    pub fn new(tag: &str, name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("hopbudget-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let made = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        Self { dir, cert, key }
    }

    /// The certificate's path, as an argument.
    pub fn cert_arg(&self) -> &str {
        self.cert.to_str().unwrap()
    }

    /// The key's path, as an argument.
    pub fn key_arg(&self) -> &str {
        self.key.to_str().unwrap()
    }
}

impl Drop for Certificate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
