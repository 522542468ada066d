//! TLS on the server's port: certificates made at test time (rcgen), a
//! rustls client, and the handshakes that must fail (plain text on the TLS
//! port, an unknown CA, no or an expired client certificate) while every
//! other client is served; SIGHUP reloading without dropping connections;
//! redis-cli's `--tls`.

mod common;

use common::{runs, tool_available, PATIENCE};
use holdline_resp::{encode_command, Decoder, Value};
use holdline_testing::certs::{Ca, ServerFiles};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

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

fn setup(name: &str) -> ServerFiles {
    ServerFiles::new(&format!("server-{name}"), "test")
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
    let other = Ca::new("other");
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
    let (client_cert, client_key) = s.authority.leaf(true);
    let client_cert = s.dir.write("client.pem", &client_cert);
    let client_key = s.dir.write("client-key.pem", &client_key);
    let (old_cert, old_key) = s.authority.leaf_valid(true, true);
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
    let fresh = Ca::new("fresh");
    let (cert, key) = fresh.leaf(false);
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

/// A client certificate for user `cn`: its config trusting the server.
fn client_as(s: &ServerFiles, cn: &str) -> Arc<ClientConfig> {
    let (cert, key) = s.authority.client_named(cn);
    let cert = s.dir.write(&format!("{cn}.pem"), &cert);
    let key = s.dir.write(&format!("{cn}-key.pem"), &key);
    tls_config(&s.ca, Some((&cert, &key)))
}

#[test]
fn a_client_certificates_cn_names_its_user() {
    let s = setup("from-cn");
    let users = s.dir.write(
        "users",
        "alice alice-token-0123456789 locks=team-a.*\nroot root-token-0123456789 admin\n",
    );
    let mut args = vec!["--tls-cert", &s.cert, "--tls-key", &s.key];
    args.extend([
        "--tls-client-ca",
        &s.ca,
        "--users",
        &users,
        "--tls-user-from-cn",
    ]);
    let server = common::Server::start(&args);
    // No AUTH: the certificate says who it is, with that user's rights.
    let mut alice = TlsClient::connect(server.addr, client_as(&s, "alice"));
    grant(&mut alice, &["TRYHOLD", "team-a.jobs", "k"]);
    assert_eq!(
        alice.call(&["TRYHOLD", "payments", "k"]).unwrap(),
        Value::Error("NOPERM user alice may not use lock \"payments\"".into())
    );
    let mut root = TlsClient::connect(server.addr, client_as(&s, "root"));
    grant(&mut root, &["TRYHOLD", "payments", "k"]);
    // A CN naming no user: told why, then closed.
    let mut mallory = TlsClient::connect(server.addr, client_as(&s, "mallory"));
    let refused = "NOPERM the client certificate's CN \"mallory\" names no user";
    assert_eq!(
        mallory.call(&["PING"]).unwrap(),
        Value::Error(refused.into())
    );
    assert!(mallory.call(&["PING"]).is_err(), "closed after the refusal");
    // The flag needs client certificates and users to name.
    let out = Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-user-from-cn"])
        .args([
            "--tls-cert",
            &s.cert,
            "--tls-key",
            &s.key,
            "--tls-client-ca",
            &s.ca,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--users"));
}
