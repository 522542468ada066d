//! Prometheus metrics (prometheus-client): connections, commands by name,
//! errors by kind, and per lock (label `lock`, never the key) live and held
//! keys, waiters, grants, timeouts, revocations, expirations, and the wait
//! and hold times as histograms in seconds; in a cluster, the partitions
//! served and the etcd lease's time left. `--metrics ADDR` serves them on
//! `/metrics` in Prometheus's text format, with `/healthz` (liveness: 200
//! while serving, 503 once shutting down) and `/readyz` (readiness: 200
//! `ready`, else 503 and why: draining, shutting down, in a cluster no
//! live etcd lease or its share not served), and the page (`/`, its data on
//! `/api/state`; made by `page`), on a port of their own.
//!
//! The command path pays an atomic add per command and per error (the
//! handles are made once, up front); a histogram observation per grant
//! and per release; everything per lock is read from the core's counters
//! at scrape time.

use crate::reply::ErrorWord;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::{info, warn};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabel {
    command: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LockLabel {
    lock: String,
}

/// What the command path records into.
pub struct Metrics {
    registry: Registry,
    commands: Vec<Counter>,
    errors: Vec<Counter>,
    wait: Family<LockLabel, Histogram>,
    hold: Family<LockLabel, Histogram>,
    /// Each lock's (wait, hold) histograms, looked up by `&str`: a grant
    /// then costs no label allocation.
    by_lock: RwLock<HashMap<String, (Histogram, Histogram)>>,
    /// False once the server shuts down (`/healthz` answers 503).
    serving: AtomicBool,
}

fn seconds_histogram() -> Histogram {
    // 100 us to ~26 s, four times apart.
    Histogram::new(exponential_buckets(0.0001, 4.0, 10))
}

impl Metrics {
    /// The registry, counting the commands `commands_named` (by index),
    /// with the server-wide and per-lock figures read from `source` at
    /// scrape time.
    pub fn new(
        commands_named: &[&'static str],
        source: impl Fn() -> Option<Snapshot> + Send + Sync + 'static,
    ) -> Metrics {
        let mut registry = Registry::with_prefix("holdline");
        let commands: Family<CommandLabel, Counter> = Family::default();
        let handles = commands_named
            .iter()
            .map(|&command| commands.get_or_create(&CommandLabel { command }).clone())
            .collect();
        registry.register("commands", "Commands carried out, by name", commands);
        let errors: Family<KindLabel, Counter> = Family::default();
        let error_handles = ErrorWord::ALL
            .iter()
            .map(|word| {
                let kind = word.label();
                errors.get_or_create(&KindLabel { kind }).clone()
            })
            .collect();
        registry.register("errors", "Error replies, by kind", errors);
        let wait = Family::<LockLabel, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> Histogram,
        );
        let hold = Family::<LockLabel, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> Histogram,
        );
        registry.register_with_unit(
            "wait",
            "Time a HOLD waited in its key's line before its grant",
            Unit::Seconds,
            wait.clone(),
        );
        registry.register_with_unit(
            "hold",
            "Time a lease was held, from its grant to its release or loss",
            Unit::Seconds,
            hold.clone(),
        );
        registry.register_collector(Box::new(ServerCollector {
            source: Box::new(source),
        }));
        Metrics {
            registry,
            commands: handles,
            errors: error_handles,
            wait,
            hold,
            by_lock: RwLock::new(HashMap::new()),
            serving: AtomicBool::new(true),
        }
    }

    /// The command of index `command` in the names given was carried out.
    pub fn command(&self, command: usize) {
        if let Some(c) = self.commands.get(command) {
            c.inc();
        }
    }

    /// An error reply starting with `word`.
    pub fn error(&self, word: ErrorWord) {
        self.errors[word.index()].inc();
    }

    pub fn waited(&self, lock: &str, waited: Duration) {
        self.histograms(lock).0.observe(waited.as_secs_f64());
    }

    pub fn held(&self, lock: &str, held: Duration) {
        self.histograms(lock).1.observe(held.as_secs_f64());
    }

    /// The lock's (wait, hold) histograms, made on its first grant.
    fn histograms(&self, lock: &str) -> (Histogram, Histogram) {
        let cached = self.by_lock.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(pair) = cached.get(lock) {
            return pair.clone();
        }
        drop(cached);
        let label = LockLabel {
            lock: lock.to_owned(),
        };
        let pair = (
            self.wait.get_or_create(&label).clone(),
            self.hold.get_or_create(&label).clone(),
        );
        let mut cache = self.by_lock.write().unwrap_or_else(PoisonError::into_inner);
        cache.insert(label.lock, pair.clone());
        pair
    }

    /// Forgets the histograms of every lock but those `keep` names: the
    /// others' names nobody uses any more.
    pub fn forget_locks_but(&self, keep: impl Fn(&str) -> bool) {
        let mut cache = self.by_lock.write().unwrap_or_else(PoisonError::into_inner);
        cache.retain(|lock, _| {
            if keep(lock) {
                return true;
            }
            let label = LockLabel { lock: lock.clone() };
            self.wait.remove(&label);
            self.hold.remove(&label);
            false
        });
    }

    /// The exposition, in Prometheus's text format (0.0.4).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        to_prometheus_text(&out)
    }

    pub fn shutting_down(&self) {
        // Relaxed: a flag read by the next probe; nothing else rides on it.
        self.serving.store(false, Ordering::Relaxed);
    }
}

/// The figures read at scrape time.
pub struct Snapshot {
    pub connections: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub blocked: u64,
    /// Events the audit log dropped (its writer was behind).
    pub audit_dropped: u64,
    /// Each lock's name and its counters (as `LockStats::fields` names them).
    pub locks: Vec<(String, [(&'static str, u64); 7])>,
    /// In a cluster: partitions served here, and milliseconds the etcd
    /// lease surely lives (0: none).
    pub cluster: Option<(u64, u64)>,
}

/// Connections and per-lock figures, read at scrape time.
struct ServerCollector {
    source: Box<dyn Fn() -> Option<Snapshot> + Send + Sync>,
}

impl std::fmt::Debug for ServerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerCollector")
    }
}

impl Collector for ServerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(snap) = (self.source)() else {
            return Ok(());
        };
        let gauge = |n: u64| ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
        let e = &mut encoder;
        encode_one(
            e,
            "connections",
            "Connections open now",
            &gauge(snap.connections),
        )?;
        let accepted = ConstCounter::new(snap.accepted);
        encode_one(e, "connections_accepted", "Connections accepted", &accepted)?;
        let rejected = ConstCounter::new(snap.rejected);
        encode_one(
            e,
            "connections_rejected",
            "Connections refused at the limit",
            &rejected,
        )?;
        let blocked = gauge(snap.blocked);
        encode_one(
            e,
            "blocked_connections",
            "Connections with a waiting HOLD",
            &blocked,
        )?;
        let dropped = ConstCounter::new(snap.audit_dropped);
        encode_one(
            e,
            "audit_dropped_events",
            "Events the audit log dropped: its writer was behind",
            &dropped,
        )?;
        if let Some((served, lease_ms)) = snap.cluster {
            encode_one(
                e,
                "cluster_partitions_served",
                "Partitions of the cluster this node serves now",
                &gauge(served),
            )?;
            encode_one(
                e,
                "cluster_lease_left_seconds",
                "How long the node's etcd lease surely lives (0: none; it serves nothing)",
                &ConstGauge::new(lease_ms as f64 / 1000.0),
            )?;
        }
        encode_locks(&snap.locks, e)
    }
}

fn encode_one(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    let metric_encoder = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(metric_encoder)
}

/// One family per lock figure, one sample per lock.
fn encode_locks(
    locks: &[(String, [(&'static str, u64); 7])],
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let locks: Vec<(LockLabel, &[(&'static str, u64); 7])> = locks
        .iter()
        .map(|(lock, fields)| (LockLabel { lock: lock.clone() }, fields))
        .collect();
    let figures = [
        ("lock_live_keys", "Keys with state in memory", false),
        ("lock_held_keys", "Keys with a holder", false),
        ("lock_waiters", "Holders standing in lines", false),
        ("lock_grants", "Grants made", true),
        ("lock_timeouts", "Waits that ended in use", true),
        ("lock_revocations", "Leases revoked at their maxHold", true),
        ("lock_expirations", "Leases that ran out at their ttl", true),
    ];
    for (i, (name, help, counter)) in figures.into_iter().enumerate() {
        if counter {
            let kind = ConstCounter::new(0u64).metric_type();
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for (label, fields) in &locks {
                ConstCounter::new(fields[i].1).encode(family.encode_family(label)?)?;
            }
        } else {
            let kind = ConstGauge::new(0i64).metric_type();
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for (label, fields) in &locks {
                let n = i64::try_from(fields[i].1).unwrap_or(i64::MAX);
                ConstGauge::new(n).encode(family.encode_family(label)?)?;
            }
        }
    }
    Ok(())
}

/// prometheus-client writes OpenMetrics, whose `# HELP`/`# TYPE` lines
/// name a counter without its `_total` and which adds `# UNIT` and `# EOF`
/// lines. Prometheus's own text format (what `promtool check metrics` and
/// every scraper read by default) names the counter as its samples do and
/// has neither: rewrite those lines, keep every sample as it is.
fn to_prometheus_text(open_metrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = open_metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len());
    for line in open_metrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let header = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match header {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(&format!("{prefix}{name}{total} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Whether a token is an admin's (`Authorization: Bearer TOKEN`).
pub type Admits = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Who may read the listener's paths.
#[derive(Clone)]
pub struct Access {
    /// Whether the listener is on a loopback address.
    pub loopback: bool,
    /// Whether the server has tokens (`--token-file`, `--users`).
    pub auth_configured: bool,
    pub admits: Admits,
}

/// Whether a request for `path` must bear an admin's token: off loopback
/// on a server with tokens, every path but `/healthz` and `/readyz` (a
/// load balancer's probe carries none, and they tell nothing of the locks). Off loopback
/// without tokens the server never starts (`config`), so that case never
/// serves.
pub fn needs_token(path: &str, listener_is_loopback: bool, auth_configured: bool) -> bool {
    !listener_is_loopback && auth_configured && !PROBES.contains(&path)
}

/// The probes anyone may ask.
const PROBES: [&str; 2] = ["/healthz", "/readyz"];

/// The page (`/`) and its data (`/api/state`): made by the caller, which
/// knows the server's state (`None`: the server is gone).
#[derive(Clone)]
pub struct Page {
    pub html: &'static str,
    pub state: Arc<dyn Fn() -> Option<String> + Send + Sync>,
    /// `/readyz`: ready, or why not.
    pub ready: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
}

/// Serves `/metrics`, `/healthz`, `/readyz`, `/` and `/api/state` on `listener`
/// until the runtime ends, each to whom `access` admits.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, access: Access, page: Page) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (metrics, access, page) = (metrics.clone(), access.clone(), page.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<_>| {
                let (metrics, page) = (metrics.clone(), page.clone());
                let path = req.uri().path().to_owned();
                let admitted = !needs_token(&path, access.loopback, access.auth_configured) || {
                    let header = req.headers().get(hyper::header::AUTHORIZATION);
                    let token = header.and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
                    token.is_some_and(|t| (access.admits)(t))
                };
                async move {
                    Ok::<_, std::convert::Infallible>(match admitted {
                        true => answer(&metrics, &page, &path).await,
                        false => unauthorized(),
                    })
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            let _ = conn.await;
        });
    }
}

/// What the page's paths answer: no cache (it is live), and a policy that
/// lets the page load nothing from elsewhere.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
    style-src 'unsafe-inline'; connect-src 'self'; img-src data:";

/// Ready while serving and the server says so.
fn readiness(metrics: &Metrics, page: &Page) -> Result<(), String> {
    // Relaxed: as in `shutting_down`.
    if !metrics.serving.load(Ordering::Relaxed) {
        return Err("shutting down".to_owned());
    }
    (page.ready)()
}

async fn answer(metrics: &Metrics, page: &Page, path: &str) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.encode(),
        ),
        // Relaxed: as in `shutting_down`.
        "/healthz" if metrics.serving.load(Ordering::Relaxed) => {
            (StatusCode::OK, "text/plain", "ok\n".to_owned())
        }
        "/healthz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "shutting down\n".to_owned(),
        ),
        "/readyz" => match readiness(metrics, page) {
            Ok(()) => (StatusCode::OK, "text/plain", "ready\n".to_owned()),
            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", why + "\n"),
        },
        "/" => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            page.html.to_owned(),
        ),
        "/api/state" => {
            // A pass over every connection: off the runtime's threads.
            let state = page.state.clone();
            match tokio::task::spawn_blocking(move || state()).await {
                Ok(Some(json)) => (StatusCode::OK, "application/json", json),
                _ => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "shutting down\n".to_owned(),
                ),
            }
        }
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /, /api/state, /metrics, /healthz or /readyz\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let mut set = |name: hyper::header::HeaderName, value: &str| {
        if let Ok(v) = value.parse() {
            headers.insert(name, v);
        }
    };
    set(hyper::header::CONTENT_TYPE, content_type);
    if matches!(path, "/" | "/api/state") {
        set(hyper::header::CACHE_CONTROL, "no-store");
        set(hyper::header::CONTENT_SECURITY_POLICY, PAGE_POLICY);
        set(hyper::header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    }
    response
}

/// 401: the request bore no admin's token.
fn unauthorized() -> Response<Full<Bytes>> {
    let body = "an admin's token is needed: Authorization: Bearer TOKEN\n";
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    if let Ok(v) = "Bearer".parse() {
        response
            .headers_mut()
            .insert(hyper::header::WWW_AUTHENTICATE, v);
    }
    response
}

/// Binds the metrics port (before the main one, so a busy port fails the
/// start).
pub async fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await?;
    info!(addr = %listener.local_addr()?, "metrics on /metrics, /healthz and /readyz, the page on /");
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::needs_token;

    #[test]
    fn off_loopback_with_tokens_every_path_but_the_probes_needs_a_token() {
        for path in [
            "/",
            "/api/state",
            "/metrics",
            "/nothing",
            "/healthz/",
            "/readyz/",
        ] {
            assert!(needs_token(path, false, true), "{path}");
            assert!(!needs_token(path, true, true), "{path} on loopback");
            assert!(!needs_token(path, true, false), "{path} on loopback");
        }
        assert!(!needs_token("/healthz", false, true));
        assert!(!needs_token("/readyz", false, true));
        // Refused at start (`config`): no such server serves.
        assert!(!needs_token("/metrics", false, false));
    }
}
