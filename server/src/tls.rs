//! TLS for the listener (rustls; no OpenSSL): the server's certificate and
//! key, and optionally the CA that every client certificate must chain to.
//! TLS 1.2 and 1.3 only. SIGHUP reloads the files without touching the
//! connections already made; a file that fails to load keeps the old
//! configuration and says why. A handshake that fails (a plain-text client
//! on the TLS port, an unknown CA, an expired certificate) closes that
//! connection only, and is logged at most once a second.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::version::{TLS12, TLS13};
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

/// How long a client may take over its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Failed handshakes are logged at most this often.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(1);

/// Where the PEM files are.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Client certificates must chain to this CA (none: not asked for).
    pub client_ca: Option<PathBuf>,
    /// A client certificate's CN names the user the connection is
    /// (`--tls-user-from-cn`); one naming no user is refused.
    pub user_from_cn: bool,
}

/// The listener's TLS: the acceptor in force, and how to make it again.
pub struct Tls {
    files: TlsFiles,
    acceptor: RwLock<TlsAcceptor>,
    /// When a failed handshake was last logged, and how many since.
    failures: Mutex<(Option<Instant>, u64)>,
}

impl Tls {
    /// Loads the files; an error names the file and what is wrong with it.
    pub fn load(files: TlsFiles) -> Result<Tls, String> {
        let acceptor = acceptor(&files)?;
        Ok(Tls {
            files,
            acceptor: RwLock::new(acceptor),
            failures: Mutex::new((None, 0)),
        })
    }

    /// The acceptor for the next connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the files again (SIGHUP); on failure the old ones stay.
    pub fn reload(&self) {
        match acceptor(&self.files) {
            Ok(fresh) => {
                *self
                    .acceptor
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = fresh;
                info!(cert = %self.files.cert.display(), "TLS certificate and key reloaded");
            }
            Err(why) => warn!(%why, "TLS reload failed; the previous certificate stays"),
        }
    }

    /// Whether a client certificate's CN names the connection's user.
    pub fn user_from_cn(&self) -> bool {
        self.files.user_from_cn
    }

    /// A handshake failed: logged, unless one was logged within a second.
    pub fn handshake_failed(&self, peer: std::net::SocketAddr, why: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        failures.1 += 1;
        let due = failures
            .0
            .is_none_or(|last| last.elapsed() >= FAILURE_LOG_EVERY);
        if due {
            let count = std::mem::take(&mut failures.1);
            failures.0 = Some(Instant::now());
            info!(%peer, %why, failed_since_last_report = count, "TLS handshake failed");
        }
    }
}

/// The common name (CN) of the subject of a connection's client
/// certificate, if it presented one that has one.
pub fn peer_common_name<S>(stream: &tokio_rustls::server::TlsStream<S>) -> Option<String> {
    let (_, connection) = stream.get_ref();
    let der = connection.peer_certificates()?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    Ok(TlsAcceptor::from(Arc::new(server_config(files)?)))
}

fn server_config(files: &TlsFiles) -> Result<ServerConfig, String> {
    let provider = Arc::new(ring::default_provider());
    let certs = certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("--tls-key {}: {e}", files.key.display()))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&TLS13, &TLS12])
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("--tls-client-ca {}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("--tls-client-ca {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("--tls-cert {}: {e}", files.cert.display()))
}

/// Every certificate of a PEM file; none at all is an error.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}
