//! TLS for one transfer: a self-signed certificate made at start (rcgen,
//! ring), the server presenting it and the client trusting exactly it.

use super::error::QuicError;
use quinn_proto::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use quinn_proto::rustls::RootCertStore;
use quinn_proto::{ClientConfig, ServerConfig};
use std::sync::Arc;

/// The name the certificate is made for and the client asks for.
pub const SERVER_NAME: &str = "osprobe-quic.invalid";

/// A server and a client configuration that trust each other and nothing
/// else.
pub struct TlsPair {
    pub server: ServerConfig,
    pub client: ClientConfig,
}

pub fn make_pair() -> Result<TlsPair, QuicError> {
    let certified = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
        .map_err(QuicError::tls("making the self-signed certificate"))?;
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
    let server = ServerConfig::with_single_cert(vec![cert.clone()], key)
        .map_err(QuicError::tls("the server's certificate"))?;
    let mut roots = RootCertStore::empty();
    roots
        .add(cert)
        .map_err(QuicError::tls("trusting the certificate"))?;
    let client = ClientConfig::with_root_certificates(Arc::new(roots))
        .map_err(QuicError::tls("the client's verifier"))?;
    Ok(TlsPair { server, client })
}
