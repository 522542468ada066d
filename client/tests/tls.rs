//! TLS to a real `holdline serve --tls-cert ... --tls-key ...`, with a CA
//! and certificates made at test time (rcgen): holds and the lease's clock
//! over TLS, a client that trusts another CA, and a server that requires
//! client certificates.

mod common;

use common::{assert_text_with_reason, granted_at, Proxy, Server, PATIENCE};
use holdline_client::rustls::pki_types::pem::PemObject;
use holdline_client::rustls::pki_types::CertificateDer;
use holdline_client::rustls::{self, ClientConfig, RootCertStore};
use holdline_client::{ConnectOptions, ErrorKind, Store, Value};
use holdline_testing::certs::{Ca, ServerFiles};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::timeout;

/// A CA, a server certificate it signed, and their files.
struct Setup(ServerFiles);

impl std::ops::Deref for Setup {
    type Target = ServerFiles;

    fn deref(&self) -> &ServerFiles {
        &self.0
    }
}

impl Setup {
    fn new(name: &str) -> Setup {
        Setup(ServerFiles::new(&format!("client-{name}"), "trusted"))
    }

    /// `holdline serve` with this certificate, requiring client
    /// certificates signed by `client_ca` when given one.
    fn server(&self, client_ca: Option<&str>) -> Server {
        let mut args = vec!["--tls-cert", &self.cert, "--tls-key", &self.key];
        if let Some(ca) = client_ca {
            args.extend(["--tls-client-ca", ca]);
        }
        Server::start_with_args(&args)
    }

    /// Options trusting this CA.
    fn trusting(&self) -> ConnectOptions {
        ConnectOptions::new().tls_ca_file(&self.ca).unwrap()
    }

    /// A client certificate signed by `ca`, as files.
    fn client_cert(&self, ca: &Ca, name: &str) -> (String, String) {
        let (cert, key) = ca.leaf(true);
        (
            self.dir.write(&format!("{name}.pem"), &cert),
            self.dir.write(&format!("{name}-key.pem"), &key),
        )
    }
}

fn port(addr: &str) -> &str {
    addr.rsplit(':').next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_work_over_tls() {
    let s = Setup::new("holds");
    let server = s.server(None);
    let store = Store::connect_with(&server.addr, s.trusting())
        .await
        .expect("TLS with the CA");
    let lock = store.lock("tls").open().unwrap();
    let held = lock.acquire("k").await.unwrap();
    assert!(held.fence() > 0);

    // A DNS name through a rediss:// URL, checked against the same CA.
    let url = format!("rediss://localhost:{}", port(&server.addr));
    let other = Store::connect_with(&url, s.trusting()).await.unwrap();
    let other_lock = other.lock("tls").open().unwrap();
    assert_eq!(other_lock.try_hold("k", async |_| ()).await.unwrap(), None);
    held.release().await.unwrap();
    let fence = other_lock.hold("k", async |l| l.fence()).await.unwrap();
    assert!(fence > 0);

    // A whole rustls config (built with the client's own rustls).
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(CertificateDer::pem_file_iter(&s.ca).unwrap().flatten());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let options = ConnectOptions::new().tls_config(Arc::new(config));
    let third = Store::connect_with(&server.addr, options).await.unwrap();
    // The low-level connection of a TLS store speaks TLS too.
    let mut conn = third.connection().await.unwrap();
    assert_eq!(
        conn.command(&["PING"]).await.unwrap(),
        Value::simple("PONG")
    );

    // Plain text on the TLS port fails at connect, not at the first hold.
    let plain = Store::connect(&server.addr).await.unwrap_err();
    assert_eq!(plain.kind(), ErrorKind::Closed, "{plain}");
    // And a redis:// URL stays plain: TLS options with it are refused.
    let url = format!("redis://127.0.0.1:{}", port(&server.addr));
    let e = Store::connect_with(&url, s.trusting()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_tls_link_loses_the_lease_before_anyone_else_is_granted() {
    let s = Setup::new("frozen");
    let server = s.server(None);
    let proxy = Proxy::start(&server.addr);
    let far = Store::connect_with(&proxy.addr, s.trusting())
        .await
        .unwrap();
    let near = Store::connect_with(&server.addr, s.trusting())
        .await
        .unwrap();
    let ttl = Duration::from_secs(2);
    let far_lock = far.lock("frozen").ttl(ttl).open().unwrap();
    let near_lock = near.lock("frozen").open().unwrap();

    let held = far_lock.acquire("k").await.unwrap();
    let waiter = granted_at(near_lock, "k");
    // Renewals go through the link until it freezes.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!held.is_lost());
    let next_grant = async { waiter.await.unwrap().unwrap().0 };
    common::lost_before_the_next_grant(&proxy, &held, next_grant, ttl).await;
    proxy.thaw();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trusting_another_ca_fails_at_connect() {
    let s = Setup::new("stranger");
    let server = s.server(None);
    let other = s.dir.write("other-ca.pem", &Ca::new("other").cert.pem());
    let options = ConnectOptions::new().tls_ca_file(&other).unwrap();
    let e = timeout(PATIENCE, Store::connect_with(&server.addr, options))
        .await
        .expect("fails at once")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed);
    let vars = [("hostport", server.addr.as_str())];
    assert_text_with_reason("tls_failed", &vars, &e.to_string());
    assert!(e.io_error().is_some(), "the TLS error is its source");
    // Given no CA, rediss:// trusts Mozilla's roots, which did not sign the
    // test CA either.
    let url = format!("rediss://127.0.0.1:{}", port(&server.addr));
    let e = Store::connect(&url).await.unwrap_err();
    assert_text_with_reason("tls_failed", &vars, &e.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_wants_client_certificates_serves_only_clients_with_one() {
    let s = Setup::new("mutual");
    let server = s.server(Some(&s.ca));
    let (cert, key) = s.client_cert(&s.authority, "client");
    let options = s.trusting().tls_client_cert(&cert, &key).unwrap();
    let store = Store::connect_with(&server.addr, options).await.unwrap();
    let lock = store.lock("mutual").open().unwrap();
    assert!(lock.hold("k", async |l| l.fence()).await.unwrap() > 0);

    let vars = [("hostport", server.addr.as_str())];
    // Under TLS 1.3 the refusal comes after the client's side of the
    // handshake, as an alert ahead of HELLO's answer: still at connect.
    let e = Store::connect_with(&server.addr, s.trusting())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed);
    assert_text_with_reason("tls_failed", &vars, &e.to_string());
    // A certificate from a CA the server does not know is refused too.
    let (cert, key) = s.client_cert(&Ca::new("unknown"), "stranger");
    let options = s.trusting().tls_client_cert(&cert, &key).unwrap();
    let e = Store::connect_with(&server.addr, options)
        .await
        .unwrap_err();
    assert_text_with_reason("tls_failed", &vars, &e.to_string());
    // A key that is not the certificate's fails when given.
    let (_, other_key) = s.client_cert(&s.authority, "other");
    let e = s.trusting().tls_client_cert(&cert, &other_key).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
}
