//! TLS on the server's port: certificates made at test time (rcgen), a
//! rustls client, and the handshakes that must fail (plain text on the TLS
//! port, an unknown CA, no or an expired client certificate) while every
//! other client is served; SIGHUP reloading without dropping connections;
//! redis-cli's `--tls`.

mod common;

use common::{runs, tool_available, PATIENCE};
use holdline_resp::{encode_command, Decoder, Value};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// A certificate authority made for one test.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new() -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // OpenSSL (redis-cli) wants a named issuer that may sign certificates.
        params
            .distinguished_name
            .push(DnType::CommonName, "holdline test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A leaf for 127.0.0.1 and localhost: a server's, or a client's.
    fn leaf(&self, client: bool, expired: bool) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
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

/// Files in a directory removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("holdline-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn write(&self, name: &str, text: &str) -> String {
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

/// A TLS client trusting `ca`, with a client certificate when given one.
fn tls_config(ca: &str, identity: Option<(&str, &str)>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(key).unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
    };
    Arc::new(config)
}

/// A blocking RESP client over TLS.
struct TlsClient {
    stream: StreamOwned<ClientConnection, TcpStream>,
    decoder: Decoder,
    buf: bytes::BytesMut,
}

impl TlsClient {
    fn connect(addr: SocketAddr, config: Arc<ClientConfig>) -> TlsClient {
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(PATIENCE)).unwrap();
        let name = ServerName::IpAddress(addr.ip().into());
        let conn = ClientConnection::new(config, name).unwrap();
        TlsClient {
            stream: StreamOwned::new(conn, sock),
            decoder: Decoder::new(usize::MAX),
            buf: bytes::BytesMut::new(),
        }
    }

    /// One command's answer, or the I/O error (a refused handshake shows
    /// here: the handshake runs on the first write and read).
    fn call(&mut self, args: &[&str]) -> std::io::Result<Value> {
        let mut out = Vec::new();
        encode_command(args, &mut out);
        self.stream.write_all(&out)?;
        loop {
            if let Some(v) = self.decoder.decode(&mut self.buf).unwrap() {
                return Ok(v);
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

struct Setup {
    dir: Dir,
    ca: String,
    cert: String,
    key: String,
    authority: Ca,
}

fn setup(name: &str) -> Setup {
    let dir = Dir::new(name);
    let authority = Ca::new();
    let (cert, key) = authority.leaf(false, false);
    Setup {
        ca: dir.write("ca.pem", &authority.cert.pem()),
        cert: dir.write("cert.pem", &cert),
        key: dir.write("key.pem", &key),
        dir,
        authority,
    }
}

#[test]
fn a_tls_port_serves_tls_and_refuses_plain_text_and_strangers() {
    let s = setup("basic");
    let server = common::Server::start(&["--tls-cert", &s.cert, "--tls-key", &s.key]);
    let mut good = TlsClient::connect(server.addr, tls_config(&s.ca, None));
    assert_eq!(good.call(&["PING"]).unwrap(), Value::simple("PONG"));
    // Plain text on the TLS port: the handshake fails, the connection ends.
    let mut plain = TcpStream::connect(server.addr).unwrap();
    plain.set_read_timeout(Some(PATIENCE)).unwrap();
    plain.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"+PONG"), "{answer:?}");
    // A client that trusts another CA refuses the server's certificate.
    let other = Ca::new();
    let other_ca = s.dir.write("other-ca.pem", &other.cert.pem());
    let mut stranger = TlsClient::connect(server.addr, tls_config(&other_ca, None));
    assert!(stranger.call(&["PING"]).is_err());
    // Everyone else is served, on the same and on new connections.
    let (lease, _) = grant(&mut good, &["HOLD", "l", "k"]);
    assert_eq!(good.call(&["RELEASE", &lease]).unwrap(), Value::ok());
    let mut again = TlsClient::connect(server.addr, tls_config(&s.ca, None));
    assert_eq!(again.call(&["PING"]).unwrap(), Value::simple("PONG"));
}

fn grant(c: &mut TlsClient, args: &[&str]) -> (String, i64) {
    match c.call(args).unwrap() {
        Value::Array(pair) => (
            pair[0].as_integer().unwrap().to_string(),
            pair[1].as_integer().unwrap(),
        ),
        other => panic!("not granted: {other:?}"),
    }
}

#[test]
fn client_certificates_are_required_and_checked() {
    let s = setup("mutual");
    let (client_cert, client_key) = s.authority.leaf(true, false);
    let client_cert = s.dir.write("client.pem", &client_cert);
    let client_key = s.dir.write("client-key.pem", &client_key);
    let (old_cert, old_key) = s.authority.leaf(true, true);
    let old_cert = s.dir.write("old.pem", &old_cert);
    let old_key = s.dir.write("old-key.pem", &old_key);
    // A public address is allowed: client certificates stand for a token.
    let server = common::Server::start(&[
        "--tls-cert",
        &s.cert,
        "--tls-key",
        &s.key,
        "--tls-client-ca",
        &s.ca,
    ]);
    let with = tls_config(&s.ca, Some((&client_cert, &client_key)));
    let mut good = TlsClient::connect(server.addr, with.clone());
    assert_eq!(good.call(&["PING"]).unwrap(), Value::simple("PONG"));
    let mut without = TlsClient::connect(server.addr, tls_config(&s.ca, None));
    assert!(without.call(&["PING"]).is_err(), "no client certificate");
    let expired = tls_config(&s.ca, Some((&old_cert, &old_key)));
    let mut old = TlsClient::connect(server.addr, expired);
    assert!(
        old.call(&["PING"]).is_err(),
        "an expired client certificate"
    );
    assert_eq!(good.call(&["PING"]).unwrap(), Value::simple("PONG"));
}

#[test]
fn a_public_address_with_client_certificates_needs_no_token() {
    let s = setup("public");
    let out = Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--tls-cert",
            &s.cert,
            "--tls-key",
            &s.key,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "TLS alone is no authentication");
    let missing = Path::new(&s.dir.0).join("missing.pem");
    let out = Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&missing)
        .args(["--tls-key", &s.key])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("missing.pem"), "names the file: {stderr}");
}

#[test]
fn sighup_reloads_the_certificate_and_keeps_connections() {
    let s = setup("reload");
    let server = common::Server::start(&["--tls-cert", &s.cert, "--tls-key", &s.key]);
    let mut kept = TlsClient::connect(server.addr, tls_config(&s.ca, None));
    let (lease, _) = grant(&mut kept, &["HOLD", "l", "k"]);
    // A broken file first: the old certificate stays.
    std::fs::write(&s.cert, "not a certificate").unwrap();
    server.signal(libc::SIGHUP);
    let mut still = TlsClient::connect(server.addr, tls_config(&s.ca, None));
    assert_eq!(still.call(&["PING"]).unwrap(), Value::simple("PONG"));
    // Then a certificate from a new CA.
    let fresh = Ca::new();
    let (cert, key) = fresh.leaf(false, false);
    std::fs::write(&s.cert, cert).unwrap();
    std::fs::write(&s.key, key).unwrap();
    let fresh_ca = s.dir.write("fresh-ca.pem", &fresh.cert.pem());
    server.signal(libc::SIGHUP);
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let mut c = TlsClient::connect(server.addr, tls_config(&fresh_ca, None));
        if c.call(&["PING"]).is_ok() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never reloaded");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut stale = TlsClient::connect(server.addr, tls_config(&s.ca, None));
    assert!(
        stale.call(&["PING"]).is_err(),
        "the old certificate is gone"
    );
    // The connection made before both reloads kept its lease.
    assert_eq!(kept.call(&["RELEASE", &lease]).unwrap(), Value::ok());
}

#[test]
fn redis_cli_speaks_tls_with_the_ca() {
    let present = runs("redis-cli", &["--version"])
        && Command::new("redis-cli")
            .arg("--help")
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout).contains("--tls")
                    || String::from_utf8_lossy(&o.stderr).contains("--tls")
            });
    if !tool_available("redis-cli with --tls", present) {
        return;
    }
    let s = setup("cli");
    let server = common::Server::start(&["--tls-cert", &s.cert, "--tls-key", &s.key]);
    let port = server.port();
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert", &s.ca, "-h", "127.0.0.1", "-p", &port])
        .args(["TRYHOLD", "invoices", "9"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), 2, "[lease, fence]: {stdout}");
}
