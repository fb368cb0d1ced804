//! The one place HTTP clients are made: cells' loopback servers (`run::server`) and package
//! indexes (`bisect::index`).

/// A client builder with TLS ready. reqwest is built with rustls and no default crypto provider
/// (ring is smaller to build than the default), so one is installed before any client is built;
/// a second install keeps the first.
pub(crate) fn builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// Installs the process's TLS crypto provider (ring) for clients built outside this file
/// (octocrab's hyper-rustls connector reads the installed default); a second install keeps
/// the first.
pub(crate) fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
