//! TLS from the proxy (#46 item 7): to the service (`--upstream-tls`, or an `https://`
//! `--upstream`) and to an egress destination (`--egress-to LISTEN=https://HOST:PORT`), so a
//! service keeps calling plain HTTP on loopback while an HTTPS destination still gets its
//! budget: the proxy restates the deadline and then speaks TLS on the service's behalf, as
//! Envoy's upstream `transport_socket` and nginx's `proxy_pass https://` do.
//!
//! rustls with ring, as on the ingress. The certificate is verified against `--upstream-ca` or
//! `--egress-ca` (PEM) when given, else against the system's roots; its name is the host the
//! address gives (a DNS name or an IP address, which a certificate may carry as a SAN).

use std::path::Path;
use std::sync::Arc;

use http::uri::Authority;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// The connector of the pooled clients: plain HTTP for an `http` URI, TLS for an `https` one.
pub(crate) type Connector = HttpsConnector<HttpConnector>;

/// TLS to one destination.
#[derive(Clone)]
pub(crate) struct Origination {
    /// For the pooled clients (hyper-rustls sets ALPN on its copy: h2 and http/1.1).
    config: Arc<ClientConfig>,
    /// For the caller connections' own HTTP/1.1 connections (see `paired`).
    http1: TlsConnector,
    server_name: ServerName<'static>,
}

impl std::fmt::Debug for Origination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origination")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Origination {
    /// TLS to `to`, trusting the certificates in `ca` (PEM) or, without it, the system's
    /// roots; what was wrong, naming `flag` and the file.
    pub(crate) fn new(to: &Authority, ca: Option<&Path>, flag: &str) -> Result<Self, String> {
        let roots = roots(ca, flag)?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http1 = config.clone();
        http1.alpn_protocols = vec![b"http/1.1".to_vec()];
        let server_name = ServerName::try_from(to.host().to_owned())
            .map_err(|e| format!("`{}` is no name a certificate can carry: {e}", to.host()))?;
        Ok(Self {
            config: Arc::new(config),
            http1: TlsConnector::from(Arc::new(http1)),
            server_name,
        })
    }

    /// TLS over `stream` for one HTTP/1.1 connection.
    pub(crate) async fn connect(
        &self,
        stream: tokio::net::TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        self.http1.connect(self.server_name.clone(), stream).await
    }
}

/// The pooled clients' connector: TLS with `tls`, else plain HTTP only.
pub(crate) fn connector(
    mut http: HttpConnector,
    tls: Option<&Origination>,
) -> Result<Connector, String> {
    // hyper-rustls hands the connector `https` URIs, which it refuses by default.
    http.enforce_http(false);
    let config = match tls {
        Some(tls) => (*tls.config).clone(),
        // Never used: an `http` URI is not TLS, and no `https` one is made without `tls`.
        None => ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth(),
    };
    Ok(HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http))
}

fn roots(ca: Option<&Path>, flag: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(file) => {
            let certs = CertificateDer::pem_file_iter(file)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{flag} {}: {e}", file.display()))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!(
                    "{flag} {}: no CA certificate in it (PEM, `-----BEGIN CERTIFICATE-----`)",
                    file.display()
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!(%error, "reading the system's CA certificates");
            }
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(format!(
                    "no CA certificate on this system to verify the destination with: give {flag} FILE"
                ));
            }
        }
    }
    Ok(roots)
}
