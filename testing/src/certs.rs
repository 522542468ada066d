//! Certificates made at test time (rcgen) for the TLS tests of the server
//! and the Rust client: a CA, leaves for 127.0.0.1 and localhost signed by
//! it (a server's or a client's, current or long expired), and a folder of
//! PEM files removed when dropped. Used by each crate's `tests/tls.rs`.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

/// A certificate authority made for one test.
pub struct Ca {
    pub cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    /// A CA named `name`. OpenSSL (redis-cli) wants a named issuer that
    /// may sign certificates; two CAs of one name would be told apart only
    /// by their signatures, a less telling failure.
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("holdline test CA {name}"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A leaf for 127.0.0.1 and localhost, a server's or a client's: its
    /// certificate and key, PEM.
    pub fn leaf(&self, client: bool) -> (String, String) {
        self.leaf_valid(client, false)
    }

    /// The same, valid only in 2000 when `expired`.
    pub fn leaf_valid(&self, client: bool, expired: bool) -> (String, String) {
        self.leaf_named(client, expired, "localhost")
    }

    /// A client's leaf whose subject's common name is `cn` (a server's
    /// `--tls-user-from-cn` reads the user from it).
    pub fn client_named(&self, cn: &str) -> (String, String) {
        self.leaf_named(true, false, cn)
    }

    fn leaf_named(&self, client: bool, expired: bool, cn: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A CA, a server certificate it signed, and their PEM files (`ca.pem`,
/// `cert.pem`, `key.pem`) in a directory of their own.
pub struct ServerFiles {
    pub dir: Dir,
    pub authority: Ca,
    /// The files' paths.
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl ServerFiles {
    /// The files in the directory `dir_name` (see [`Dir::new`]), signed by
    /// a CA named `ca_name`.
    pub fn new(dir_name: &str, ca_name: &str) -> ServerFiles {
        let dir = Dir::new(dir_name);
        let authority = Ca::new(ca_name);
        let (cert, key) = authority.leaf(false);
        ServerFiles {
            ca: dir.write("ca.pem", &authority.cert.pem()),
            cert: dir.write("cert.pem", &cert),
            key: dir.write("key.pem", &key),
            authority,
            dir,
        }
    }
}

/// Files in a directory removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("holdline-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    /// Writes `text` to the file `name`, answering its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
