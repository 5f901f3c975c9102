//! TLS to PostgreSQL: the `sslmode` and `sslrootcert` of the URL (read by `crate::pgurl`) made
//! into rustls on `ring`, the TLS cairn already links for HTTPS, and handed to tokio-postgres as
//! its `MakeTlsConnect`. Written here rather than taken from `tokio-postgres-rustls`: that crate
//! would bring a second SHA-2 and an X.509 parser (for channel binding) into a binary at its
//! size bound, for some sixty lines.
//!
//! The certificate is checked as libpq checks it: not at all under `prefer` and `require`
//! (encryption only, which stops a reader of the wire but not a server in the middle), the chain
//! against the trusted roots under `verify-ca`, and the chain and the host name under
//! `verify-full`. The roots are the `sslrootcert` PEM file, read when the URL is, or else the
//! platform's, as for HTTPS (`crate::net`). SCRAM's channel binding is not offered (`-PLUS`
//! needs the certificate's hash algorithm, read from its X.509): the password exchange is plain
//! SCRAM-SHA-256 inside the TLS session.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

use crate::pgurl::SslMode;

/// Makes a TLS session for each connection tokio-postgres opens (none under `disable`).
#[derive(Clone)]
pub struct Connector {
    config: Option<Arc<rustls::ClientConfig>>,
}

impl Connector {
    /// The TLS `mode` asks for, checking certificates against `root_cert` (a PEM file) or the
    /// platform's roots. An unreadable file is an error saying what is wrong with it.
    pub fn new(mode: SslMode, root_cert: Option<&Path>) -> Result<Self, String> {
        let (platform, provider) = crate::net::platform_verifier();
        let roots = || match root_cert {
            Some(path) => read_roots(path, &provider),
            None => Ok(platform),
        };
        let verifier: Arc<dyn ServerCertVerifier> = match mode {
            SslMode::Disable => return Ok(Self { config: None }),
            SslMode::Prefer | SslMode::Require => Arc::new(Unchecked(Arc::clone(&provider))),
            SslMode::VerifyCa => Arc::new(AnyName(roots()?)),
            SslMode::VerifyFull => roots()?,
        };
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| format!("TLS cannot be set up: {err}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        // What libpq 17 offers, and what a server taking TLS directly asks for.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(Self { config: Some(Arc::new(config)) })
    }
}

/// The authorities of a PEM file, as a checker of chains and names.
fn read_roots(path: &Path, provider: &Arc<CryptoProvider>) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|err| format!("sslrootcert {shown} cannot be read ({err})"))?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!("sslrootcert {shown} holds no usable certificate"));
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map_err(|err| format!("sslrootcert {shown} cannot be used ({err})"))?;
    Ok(verifier)
}

impl<S> MakeTlsConnect<S> for Connector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Handshake;
    type Error = io::Error;

    /// Never fails: a name TLS cannot use (a Unix socket's, where the server never offers TLS)
    /// fails the handshake, if one is ever tried.
    fn make_tls_connect(&mut self, domain: &str) -> io::Result<Handshake> {
        let name = ServerName::try_from(domain.to_owned()).ok();
        Ok(Handshake { config: self.config.clone(), name })
    }
}

/// One connection's handshake.
pub struct Handshake {
    config: Option<Arc<rustls::ClientConfig>>,
    name: Option<ServerName<'static>>,
}

impl<S> TlsConnect<S> for Handshake
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let (Some(config), Some(name)) = (self.config, self.name) else {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "TLS asked of a connection with no host name"));
            };
            let tls = tokio_rustls::TlsConnector::from(config).connect(name, stream).await?;
            Ok(Stream(Box::new(tls)))
        })
    }
}

/// A connection in TLS.
pub struct Stream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the name it was issued for is not looked at.
#[derive(Debug)]
struct AnyName(Arc<dyn ServerCertVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: any certificate; the handshake's signatures are still checked, so the
/// session is encrypted with the holder of the certificate's key, whoever that is.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Whether `err` (a failed connection's) is a certificate the checks refused, and why.
pub fn refused_certificate(err: &tokio_postgres::Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(current) = cause {
        let rustls_error = current
            .downcast_ref::<rustls::Error>()
            .or_else(|| current.downcast_ref::<io::Error>()?.get_ref()?.downcast_ref::<rustls::Error>());
        if let Some(rustls::Error::InvalidCertificate(why)) = rustls_error {
            return Some(why.to_string());
        }
        cause = current.source();
    }
    None
}
