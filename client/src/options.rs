//! How to connect: the user and its token, and TLS: whom to trust (a CA file;
//! Mozilla's roots for a `rediss://` address given none; or the caller's
//! whole rustls `ClientConfig`) and, for a server that asks for one, a
//! client certificate. Files are read when the option is given, so a bad
//! file fails there, not at the first connection.

use crate::address::{self, Address, Scheme};
use crate::error::Error;
use crate::texts;
use holdline::wire::{self, Scope};
use holdline::ErrorKind;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::sign::{CertifiedKey, SingleCertAndKey};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// How [`Store::connect_with`](crate::Store::connect_with) connects: the
/// user and its token, and TLS.
///
/// Any TLS option makes a `host:port` address speak TLS; a `rediss://`
/// address speaks TLS with or without them (trusting Mozilla's roots when
/// given no CA); a `redis://` address is plain text, and TLS options with
/// it fail `invalid` rather than be ignored.
///
/// ```no_run
/// # async fn demo() -> Result<(), holdline_client::Error> {
/// use holdline_client::{ConnectOptions, Store};
///
/// let options = ConnectOptions::new()
///     .token("s3cret")
///     .tls_ca_file("/etc/holdline/ca.pem")?
///     .tls_client_cert("/etc/holdline/client.pem", "/etc/holdline/client-key.pem")?;
/// let store = Store::connect_with("locks.internal:7380", options).await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone, Default)]
#[must_use = "ConnectOptions do nothing until given to Store::connect_with"]
pub struct ConnectOptions {
    user: Option<String>,
    token: Option<String>,
    /// The CAs of `tls_ca_file`; `None`: none given.
    roots: Option<RootCertStore>,
    identity: Option<Arc<CertifiedKey>>,
    config: Option<Arc<ClientConfig>>,
    /// `max_reply_bytes`; `None`: [`MAX_REPLY_BYTES`](crate::MAX_REPLY_BYTES).
    max_reply: Option<usize>,
}

/// Who a store's connections say they are: `HELLO 3 AUTH <user> <token>`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Auth {
    /// `default` when no user was named.
    pub(crate) user: String,
    pub(crate) token: String,
}

impl Auth {
    /// The one user of a server started with `--token-file`.
    pub(crate) fn default_user(token: &str) -> Auth {
        Auth {
            user: "default".to_owned(),
            token: token.to_owned(),
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token itself.
        write!(f, "Auth({:?}, <token>)", self.user)
    }
}

/// TLS for one store's connections: the config, and the name the server's
/// certificate must show (the address's host: a DNS name or an IP).
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) config: Arc<ClientConfig>,
    pub(crate) name: ServerName<'static>,
}

impl Tls {
    /// The same TLS for another host of the store (another node of a
    /// cluster): its certificate must show that host.
    pub(crate) fn for_host(&self, host: &str) -> Result<Tls, Error> {
        Ok(Tls {
            config: self.config.clone(),
            name: server_name(host)?,
        })
    }
}

impl ConnectOptions {
    /// No token, no TLS (unless the address is `rediss://`).
    pub fn new() -> Self {
        ConnectOptions::default()
    }

    /// The token (`HELLO 3 AUTH <user> <token>`, the user `default`
    /// unless one is named); it wins over a token in a `redis://` or
    /// `rediss://` address.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The user to connect as, on a server started with `--users` (1 to 64
    /// ASCII letters, digits or `_-.:@`); it wins over a user in a
    /// `redis://user:token@host` address. It needs a token, given with
    /// [`token`](Self::token) or in the address. Connecting fails
    /// `invalid` for a name outside that rule (`bad_user`) or a user with
    /// no token (`user_without_token`).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Trusts the CA certificates of this PEM file (and only those, with
    /// the CAs of other calls): the server's certificate must be signed by
    /// one. Fails `invalid` if the file cannot be read or holds none.
    pub fn tls_ca_file(mut self, path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let pem = read(path)?;
        let roots = self.roots.get_or_insert_with(RootCertStore::empty);
        let mut found = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| bad_file(path, "is not PEM", e))?;
            roots
                .add(cert)
                .map_err(|e| bad_file(path, "holds a CA certificate rustls refuses", e))?;
            found += 1;
        }
        if found == 0 {
            return Err(invalid(format!("the TLS file {path:?} has no certificate")));
        }
        Ok(self)
    }

    /// Presents this client certificate (a PEM chain, the leaf first) and
    /// its PEM private key to a server that asks for one. Fails `invalid`
    /// if a file cannot be read, or the key is not the certificate's.
    pub fn tls_client_cert(
        mut self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self, Error> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        let pem = read(cert)?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad_file(cert, "is not PEM", e))?;
        if certs.is_empty() {
            return Err(invalid(format!("the TLS file {cert:?} has no certificate")));
        }
        let key_der = PrivateKeyDer::from_pem_slice(&read(key)?)
            .map_err(|e| bad_file(key, "has no private key", e))?;
        let certified = CertifiedKey::from_der(certs, key_der, &provider())
            .map_err(|e| bad_file(key, "is not the key of the client certificate", e))?;
        self.identity = Some(Arc::new(certified));
        Ok(self)
    }

    /// A whole rustls `ClientConfig` (its roots, client certificate,
    /// versions), for what the other options do not cover: the platform's
    /// roots, say. Not with [`tls_ca_file`](Self::tls_ca_file) or
    /// [`tls_client_cert`](Self::tls_client_cert): connecting fails
    /// `invalid` if both are given. Its early data (0-RTT) is never used.
    pub fn tls_config(mut self, config: Arc<ClientConfig>) -> Self {
        self.config = Some(config);
        self
    }

    /// The largest reply a connection takes, in bytes (default
    /// [`MAX_REPLY_BYTES`](crate::MAX_REPLY_BYTES), 64 MiB). A reply whose
    /// header announces more fails its connection at once, before any of it
    /// is read: `store: the server at HOST:PORT announced a reply of N
    /// bytes, over the limit of LIMIT: closed` (at connect, the connect
    /// fails so).
    pub fn max_reply_bytes(mut self, bytes: usize) -> Self {
        self.max_reply = Some(bytes);
        self
    }

    /// The reply limit to connect with.
    pub(crate) fn max_reply(&self) -> usize {
        self.max_reply.unwrap_or(crate::MAX_REPLY_BYTES)
    }

    /// Whether any TLS option was given.
    fn wants_tls(&self) -> bool {
        self.roots.is_some() || self.identity.is_some() || self.config.is_some()
    }

    /// The user and token to send and the TLS to speak, for `address`.
    pub(crate) fn resolve(&self, address: &Address) -> Result<(Option<Auth>, Option<Tls>), Error> {
        let auth = self.auth(address)?;
        let tls =
            match (address.scheme, self.wants_tls()) {
                (Scheme::Plain, true) => return Err(invalid(
                    "a redis:// address is plain text, yet TLS options were given (use rediss://)",
                )),
                (Scheme::Plain | Scheme::Bare, false) => None,
                (Scheme::Tls, _) | (Scheme::Bare, true) => Some(Tls {
                    config: self.client_config()?,
                    name: server_name(&address.host)?,
                }),
            };
        Ok((auth, tls))
    }

    /// The user (this option's, else the address's, else `default`) and
    /// the token (the same way), if there is a token.
    fn auth(&self, address: &Address) -> Result<Option<Auth>, Error> {
        if let Some(user) = &self.user {
            if !address::is_user_name(user) {
                return Err(texts::bad_user(user));
            }
        }
        let token = self.token.as_ref().or(address.token.as_ref());
        let user = self.user.as_ref().or(address.user.as_ref());
        match (user, token) {
            (_, Some(token)) => Ok(Some(Auth {
                user: user.map_or("default", String::as_str).to_owned(),
                token: token.clone(),
            })),
            (Some(user), None) => Err(texts::user_without_token(user)),
            (None, None) => Ok(None),
        }
    }

    fn client_config(&self) -> Result<Arc<ClientConfig>, Error> {
        if let Some(config) = &self.config {
            if self.roots.is_some() || self.identity.is_some() {
                return Err(invalid(
                    "a TLS ClientConfig was given with a CA file or a client certificate: give one or the other",
                ));
            }
            return Ok(config.clone());
        }
        let roots = self.roots.clone().unwrap_or_else(|| RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        });
        let builder = ClientConfig::builder_with_provider(Arc::new(provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(format!("TLS cannot be set up ({e})")))?
            .with_root_certificates(roots);
        let config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some(identity) => builder
                .with_client_cert_resolver(Arc::new(SingleCertAndKey::from(identity.clone()))),
        };
        Ok(Arc::new(config))
    }
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token itself.
        f.debug_struct("ConnectOptions")
            .field("user", &self.user)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("tls_ca_certs", &self.roots.as_ref().map(RootCertStore::len))
            .field("tls_client_cert", &self.identity.is_some())
            .field("tls_config", &self.config.is_some())
            .field("max_reply_bytes", &self.max_reply())
            .finish()
    }
}

/// The crypto every config made here uses: ring, as the server does.
/// Named, not the process default, so a program that also links another
/// provider does not make this ambiguous.
fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The name the server's certificate must show: the address's host.
fn server_name(host: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(host.to_owned())
        .map_err(|e| invalid(format!("TLS cannot check the host name {host:?} ({e})")))
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| invalid(format!("cannot read the TLS file {path:?} ({e})")))
}

fn bad_file(path: &Path, what: &str, e: impl fmt::Display) -> Error {
    invalid(format!("the TLS file {path:?} {what} ({e})"))
}

/// `store: WHAT: invalid`, in the core's shape.
fn invalid(what: impl Into<String>) -> Error {
    let kind = ErrorKind::Invalid;
    Error::new(
        kind,
        wire::error(kind, Scope::Store, what.into()).to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(options: &ConnectOptions, addr: &str) -> Result<bool, Error> {
        let address = Address::parse(addr).unwrap();
        options.resolve(&address).map(|(_, tls)| tls.is_some())
    }

    #[test]
    fn the_address_and_the_options_decide_tls() {
        let none = ConnectOptions::new();
        let config = ConnectOptions::new().client_config().unwrap();
        let tls = ConnectOptions::new().tls_config(config);
        assert!(!resolve(&none, "h:1").unwrap());
        assert!(!resolve(&none, "redis://h").unwrap());
        assert!(resolve(&none, "rediss://h").unwrap());
        assert!(resolve(&tls, "h:1").unwrap());
        assert!(resolve(&tls, "rediss://[::1]:1").unwrap());
        let e = resolve(&tls, "redis://h").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_eq!(
            e.to_string(),
            "store: a redis:// address is plain text, yet TLS options were given (use rediss://): invalid"
        );
    }

    /// The user and token `options` send to `addr`.
    fn auth(options: &ConnectOptions, addr: &str) -> Result<Option<(String, String)>, Error> {
        let address = Address::parse(addr).unwrap();
        let (auth, _) = options.resolve(&address)?;
        Ok(auth.map(|a| (a.user, a.token)))
    }

    fn pair(user: &str, token: &str) -> Option<(String, String)> {
        Some((user.to_owned(), token.to_owned()))
    }

    #[test]
    fn the_explicit_token_wins_over_the_urls() {
        let none = ConnectOptions::new();
        assert_eq!(
            auth(&none, "rediss://:from-url@h").unwrap(),
            pair("default", "from-url")
        );
        let given = ConnectOptions::new().token("given");
        assert_eq!(
            auth(&given, "rediss://:from-url@h").unwrap(),
            pair("default", "given")
        );
        assert_eq!(auth(&none, "h:1").unwrap(), None);
        let shown = format!("{:?}", ConnectOptions::new().token("given"));
        assert!(!shown.contains("given"), "{shown}");
    }

    #[test]
    fn the_explicit_user_wins_over_the_urls() {
        let none = ConnectOptions::new();
        let url = "redis://alice:from-url@h";
        assert_eq!(auth(&none, url).unwrap(), pair("alice", "from-url"));
        let bob = ConnectOptions::new().user("bob");
        assert_eq!(auth(&bob, url).unwrap(), pair("bob", "from-url"));
        assert_eq!(auth(&bob, "redis://:t@h").unwrap(), pair("bob", "t"));
        let both = ConnectOptions::new().user("bob").token("given");
        assert_eq!(auth(&both, url).unwrap(), pair("bob", "given"));
        assert_eq!(auth(&both, "h:1").unwrap(), pair("bob", "given"));
        let token = ConnectOptions::new().token("given");
        assert_eq!(auth(&token, url).unwrap(), pair("alice", "given"));
        let shown = format!("{:?}", Auth::default_user("s3cret"));
        assert_eq!(shown, "Auth(\"default\", <token>)");
    }

    #[test]
    fn a_bad_user_or_one_without_a_token_fails_invalid() {
        for bad in ["", "a b", "é", "a/b", &"u".repeat(65)] {
            let e = auth(&ConnectOptions::new().user(bad).token("t"), "h:1").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid);
            let shown = holdline::wire::shown_key(bad);
            assert_eq!(
                e.to_string(),
                format!("store: bad user name {shown}: expected 1 to 64 ASCII letters, digits or _-.:@: invalid")
            );
        }
        let e = auth(&ConnectOptions::new().user("alice"), "redis://h").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_eq!(
            e.to_string(),
            "store: the user \"alice\" was given without a token: invalid"
        );
    }

    #[test]
    fn unreadable_and_empty_files_fail_invalid_at_once() {
        let e = ConnectOptions::new()
            .tls_ca_file("/nonexistent/ca.pem")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert!(
            e.to_string()
                .starts_with("store: cannot read the TLS file \"/nonexistent/ca.pem\" ("),
            "{e}"
        );
        let empty = std::env::temp_dir().join(format!("holdline-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = ConnectOptions::new().tls_ca_file(&empty).unwrap_err();
        std::fs::remove_file(&empty).unwrap();
        assert_eq!(
            e.to_string(),
            format!("store: the TLS file {empty:?} has no certificate: invalid")
        );
    }
}
