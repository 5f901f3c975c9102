//! Where every outgoing HTTP client starts: [`client_builder`]. TLS is rustls with `ring` as its
//! one crypto provider (the same library that hashes the system prompt), installed for the
//! process before the first client is built; a client built any other way would find no
//! provider and fail, so nothing else calls `reqwest::Client::builder`.

use std::sync::Once;

/// A client builder whose TLS is ready.
pub fn client_builder() -> reqwest::ClientBuilder {
    static PROVIDER: Once = Once::new();
    PROVIDER.call_once(|| {
        // Another provider may already be installed (by a test harness); either serves.
        let _installed = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_built_client_has_tls() {
        assert!(super::client_builder().https_only(true).build().is_ok());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
