//! TLS for `cairn serve` (`--tls-cert`, `--tls-key`): the certificate chain and key read once
//! at start, PEM files as any certificate authority or `openssl` writes them, served with rustls
//! over `ring` (the crypto cairn already links for its own HTTPS). ALPN offers HTTP/2 first,
//! which the Streamable HTTP profile asks for, then HTTP/1.1, on which a WebSocket upgrades.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The files `--tls-cert` and `--tls-key` name.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What accepts TLS with `files`' certificate, or what is wrong with them.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let certs = read_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|err| {
        format!(
            "--tls-key {}: no private key read ({err}); give the PEM file of the certificate's key",
            files.key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("TLS cannot be set up: {err}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|err| {
            format!(
                "--tls-cert {} and --tls-key {} do not make a usable pair: {err}",
                files.cert.display(),
                files.key.display()
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|err| format!("--tls-cert {shown}: cannot read certificates ({err}); give a PEM file"))?;
    if certs.is_empty() {
        return Err(format!("--tls-cert {shown} holds no certificate; give the PEM file of the server's chain"));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_are_not_a_certificate_and_its_key_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let missing = dir.path().join("missing.pem");
        let files = TlsFiles { cert: missing, key: empty.clone() };
        let err = acceptor(&files).err().unwrap();
        assert!(err.contains("--tls-cert") && err.contains("missing.pem"), "{err}");
        let files = TlsFiles { cert: empty.clone(), key: empty };
        let err = acceptor(&files).err().unwrap();
        assert!(err.contains("no certificate"), "{err}");
    }
}
