//! Where every outgoing HTTP client starts: [`client_builder`]. TLS is rustls with `ring` as its
//! one crypto provider (the same library that hashes the system prompt), installed for the
//! process before the first client is built; a client built any other way would find no
//! provider and fail, so nothing else calls `reqwest::Client::builder`.
//!
//! Servers' certificates are checked against the platform's roots (the system store, or
//! `SSL_CERT_FILE` / `SSL_CERT_DIR`), as reqwest would check them, but the roots are read at the
//! first TLS handshake, once per process, not when a client is built: reading and parsing them
//! (the bundle and each file of `/etc/ssl/certs` on Debian, several milliseconds of CPU) would
//! otherwise be paid at start-up by a process that has not yet spoken to anyone, or speaks only
//! plain HTTP. [`load_roots`] reads them ahead, off the async threads, where a connection is
//! about to be opened. [`platform_verifier`] lends the same roots to the PostgreSQL client. A
//! body whose size the server decides is read with [`read_at_most`].

use std::sync::{Arc, Once, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// A client builder whose TLS is ready.
pub fn client_builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    match tls_config() {
        Ok(config) => builder.tls_backend_preconfigured(config),
        // Then reqwest sets TLS up itself, reading the roots at once (`ring` offers both protocol
        // versions, so this is not expected).
        Err(err) => {
            tracing::warn!(%err, "TLS set up by the HTTP library instead");
            builder
        }
    }
}

/// Reads `response`'s body into `body` chunk by chunk until it ends or holds more than `limit`
/// bytes (at most one chunk more); `true` if it ended within `limit`. The rest is left unread.
pub async fn read_at_most(
    response: &mut reqwest::Response,
    body: &mut Vec<u8>,
    limit: usize,
) -> Result<bool, reqwest::Error> {
    while body.len() <= limit {
        match response.chunk().await? {
            Some(chunk) => body.extend_from_slice(&chunk),
            None => return Ok(true),
        }
    }
    Ok(false)
}

/// Reads the platform's roots now, on the calling thread (which may block), unless they are read.
pub fn load_roots() {
    let _ = verifier().platform();
}

/// TLS for a WebSocket client (`cairn acp --server wss://…`): the same roots, HTTP/1.1 only (a
/// WebSocket upgrades an HTTP/1.1 request).
pub fn websocket_tls() -> Result<tokio_rustls::TlsConnector, rustls::Error> {
    let mut config = tls_config()?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The platform's roots as a certificate checker (read at its first use, as for HTTPS), and the
/// one crypto provider: what other TLS clients of the process (PostgreSQL's) check servers with.
pub fn platform_verifier() -> (Arc<dyn ServerCertVerifier>, Arc<CryptoProvider>) {
    let verifier = verifier();
    (Arc::clone(verifier) as Arc<dyn ServerCertVerifier>, Arc::clone(&verifier.provider))
}

/// The TLS configuration every client shares: the platform's roots, read late; HTTP/2 or
/// HTTP/1.1 as the server prefers (what reqwest offers when it builds the configuration itself).
fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let verifier = Arc::clone(verifier());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::clone(&verifier.provider))
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The process's one verifier, with `ring` installed as the process's crypto provider first.
fn verifier() -> &'static Arc<LateRoots> {
    static PROVIDER: Once = Once::new();
    static VERIFIER: OnceLock<Arc<LateRoots>> = OnceLock::new();
    PROVIDER.call_once(|| {
        // Another provider may already be installed (by a test harness); either serves.
        let _installed = rustls::crypto::ring::default_provider().install_default();
    });
    VERIFIER.get_or_init(|| {
        let provider = CryptoProvider::get_default()
            .map_or_else(|| Arc::new(rustls::crypto::ring::default_provider()), Arc::clone);
        Arc::new(LateRoots { provider, platform: OnceLock::new() })
    })
}

/// Checks certificates with the platform verifier, made (reading the roots) at its first use.
/// Signatures are checked with the provider's algorithms alone, which needs no roots.
#[derive(Debug)]
struct LateRoots {
    provider: Arc<CryptoProvider>,
    platform: OnceLock<Result<rustls_platform_verifier::Verifier, rustls::Error>>,
}

impl LateRoots {
    fn platform(&self) -> Result<&rustls_platform_verifier::Verifier, rustls::Error> {
        self.platform
            .get_or_init(|| {
                rustls_platform_verifier::Verifier::new(Arc::clone(&self.provider)).inspect_err(|err| {
                    tracing::error!(%err, "the system's root certificates cannot be read; HTTPS requests will fail");
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl ServerCertVerifier for LateRoots {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.platform()?.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_built_client_has_tls() {
        assert!(super::client_builder().https_only(true).build().is_ok());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
