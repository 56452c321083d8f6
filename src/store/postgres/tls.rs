//! TLS for connections to PostgreSQL, through rustls, with the verification
//! each `sslmode` promises (libpq's meaning): `prefer` and `require` encrypt
//! without checking the certificate; `verify-ca` checks that it chains to a
//! trusted root; `verify-full` also that it names the host. The roots are the
//! system's, or `--db-ca-file`'s alone.
//!
//! It owns building the rustls configuration, and must never weaken a
//! `verify-*` mode (a certificate it cannot check is a failed connection).

use super::super::error::{Cause, StoreError};
use super::target::SslMode;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Why no TLS configuration could be built for the database's `sslmode`.
#[derive(Debug)]
pub(super) enum TlsSetupError {
    /// rustls refused its own defaults or the roots (no usable verifier).
    Config(rustls::Error),
    /// The webpki verifier could not be built from the roots.
    Verifier(rustls::client::VerifierBuilderError),
    /// `--db-ca-file` could not be read or holds no PEM certificates.
    CaFile {
        path: PathBuf,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A root certificate could not be added.
    Root(rustls::Error),
    /// `verify-ca`/`verify-full` with no trusted root at all.
    NoRoots,
}

impl fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsSetupError::Config(e) => write!(f, "TLS: {e}"),
            TlsSetupError::Verifier(e) => write!(f, "TLS roots: {e}"),
            TlsSetupError::CaFile { path, source } => {
                write!(f, "--db-ca-file {}: {source}", path.display())
            }
            TlsSetupError::Root(e) => write!(f, "a trusted root: {e}"),
            TlsSetupError::NoRoots => {
                f.write_str("no trusted roots for sslmode=verify-*: give --db-ca-file")
            }
        }
    }
}

impl std::error::Error for TlsSetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsSetupError::Config(e) | TlsSetupError::Root(e) => Some(e),
            TlsSetupError::Verifier(e) => Some(e),
            TlsSetupError::CaFile { source, .. } => Some(source.as_ref()),
            TlsSetupError::NoRoots => None,
        }
    }
}

/// A database whose TLS cannot be set up is a configuration fault, not a
/// passing one: it is `Internal`, with the reason as its source.
impl From<TlsSetupError> for StoreError {
    fn from(e: TlsSetupError) -> StoreError {
        StoreError::Internal(Cause::with_source(e.to_string(), e))
    }
}
/// The connector for `mode`, or `None` for `disable`.
pub(super) fn connector(
    mode: SslMode,
    ca_file: Option<&Path>,
) -> Result<Option<MakeRustlsConnect>, TlsSetupError> {
    if mode == SslMode::Disable {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(TlsSetupError::Config)?;
    let config = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(provider)))
            .with_no_client_auth(),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(roots(ca_file)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(TlsSetupError::Verifier)?;
            if mode == SslMode::VerifyFull {
                builder.with_webpki_verifier(webpki).with_no_client_auth()
            } else {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyName(webpki)))
                    .with_no_client_auth()
            }
        }
    };
    Ok(Some(MakeRustlsConnect::new(config)))
}

/// The trusted roots: `--db-ca-file`'s certificates, or the system's.
fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, TlsSetupError> {
    let mut store = RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = match ca_file {
        Some(path) => {
            let ca_file_error =
                |source: Box<dyn std::error::Error + Send + Sync>| TlsSetupError::CaFile {
                    path: path.to_path_buf(),
                    source,
                };
            let pem = std::fs::read(path).map_err(|e| ca_file_error(Box::new(e)))?;
            rustls::pki_types::pem::PemObject::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| ca_file_error(Box::new(e)))?
        }
        None => rustls_native_certs::load_native_certs().certs,
    };
    for cert in certs {
        store.add(cert).map_err(TlsSetupError::Root)?;
    }
    if store.is_empty() {
        return Err(TlsSetupError::NoRoots);
    }
    Ok(store)
}

/// `verify-ca`: the chain is checked, the host name is not. The name handed
/// to the webpki verifier is replaced by the one the certificate itself
/// names, so only the chain and validity decide.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
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

/// `prefer`/`require`: encrypted, certificate unchecked (libpq's meaning);
/// signatures are still checked, so the session key belongs to the
/// certificate the server sent.
#[derive(Debug)]
struct EncryptOnly(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
