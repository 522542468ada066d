//! The command line, and the start-up checks that refuse a dangerous or
//! broken configuration before anything listens.

use crate::settings::{self, Sources};
use crate::tls::TlsFiles;
use crate::users::{self, Users};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "holdline",
    version,
    about = "Keyed locks with leases, served over RESP."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve one in-memory store over RESP (redis-cli and Redis clients work).
    ///
    /// Signals: SIGTERM drains a single server first: HOLD and TRYHOLD
    /// are answered TRYAGAIN, holders keep their leases, and once nothing
    /// is held (or --drain-timeout passed, or at a second SIGTERM) it goes
    /// on as SIGINT does: closes the store (waiters answered CLOSED,
    /// holders told their leases are lost), closes every connection and
    /// exits 0. A cluster's node hands its partitions over at SIGTERM.
    /// SIGHUP reloads the TLS certificate and key (a bad file keeps the
    /// old ones and logs why).
    ///
    /// Every flag can also be set by a variable (HOLDLINE_ and the flag's
    /// name in capitals, `-` as `_`: HOLDLINE_MAX_CONNECTIONS) and by the
    /// TOML file --config names (keys the flags' names: max-connections =
    /// 100); a flag beats its variable, which beats the file.
    /// --print-config shows what is in force and where it came from.
    ///
    /// Logs go to stderr. --log-level (or HOLDLINE_LOG) is a tracing
    /// filter directive: a level (error, warn, info, debug, trace) or
    /// per-module directives such as `info,holdline=debug`.
    #[command(verbatim_doc_comment)]
    Serve(ServeArgs),
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// A TOML file of settings, keys the flags' names (`max-connections =
    /// 100`); flags and variables beat it, an unknown key is refused.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective settings and where each came from (flag, env,
    /// file, default), secrets masked, and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Address to listen on; port 0 picks a free one (printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7380")]
    pub listen: String,
    /// File holding the token every client must present (AUTH or HELLO AUTH).
    #[arg(long, value_name = "PATH", conflicts_with = "users")]
    pub token_file: Option<PathBuf>,
    /// Users, one a line: `NAME TOKEN [admin] [locks=GLOB,GLOB...]`
    /// (`AUTH NAME TOKEN`; reloaded on SIGHUP). A user without `admin`
    /// names only the locks its globs match.
    #[arg(long, value_name = "PATH")]
    pub users: Option<PathBuf>,
    /// Connections served at once; the next is answered an error and closed.
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// Threads serving connections, each with an event loop of its own
    /// (default: one per CPU). One spends the least
    /// CPU per request at light load; one per CPU carries the most
    /// requests when they are busy.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub cores: Option<u64>,
    /// Bytes of one command's whole frame, checked before buffering it.
    #[arg(long, value_name = "BYTES", default_value_t = 524_288,
          value_parser = clap::value_parser!(u64).range(64..=1 << 30))]
    pub max_frame: u64,
    /// PEM certificate chain: the port speaks TLS 1.2/1.3 only (with --tls-key).
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA: every client must present a certificate it signed.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Under --tls-client-ca, a client certificate's subject CN names the
    /// user (of --users) the connection is, with no AUTH; a CN naming no
    /// user is refused.
    #[arg(long, requires_all = ["tls_client_ca", "users"])]
    pub tls_user_from_cn: bool,
    /// Serve Prometheus metrics on http://ADDR/metrics (and /healthz).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Log filter (also HOLDLINE_LOG, weaker than HOLDLINE_LOG_LEVEL;
    /// default info): a level or tracing directives such as
    /// `info,holdline=debug`.
    #[arg(long, value_name = "DIRECTIVE")]
    pub log_level: Option<String>,
    /// Log line format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Run as one node of a cluster whose owners etcd decides: etcd's
    /// client URLs, comma-separated (with --cluster and --advertise).
    #[arg(long, value_name = "URLS", requires_all = ["cluster", "advertise"])]
    pub etcd: Option<String>,
    /// The cluster's name: nodes with the same etcd and name split the keys.
    #[arg(long, value_name = "NAME", requires = "etcd")]
    pub cluster: Option<String>,
    /// host:port clients and other nodes reach this node at (MOVED names
    /// it); port 0 stands for the port the node listens on.
    #[arg(long, value_name = "HOST:PORT", requires = "etcd")]
    pub advertise: Option<String>,
    /// PEM CA that signed etcd's certificate: etcd is reached over TLS
    /// (`https://` URLs in --etcd).
    #[arg(long, value_name = "PATH", requires = "etcd")]
    pub etcd_cacert: Option<PathBuf>,
    /// PEM client certificate for etcd's `--client-cert-auth` (with
    /// --etcd-key and --etcd-cacert).
    #[arg(long, value_name = "PATH", requires_all = ["etcd_key", "etcd_cacert"])]
    pub etcd_cert: Option<PathBuf>,
    /// PEM private key of --etcd-cert.
    #[arg(long, value_name = "PATH", requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
    /// etcd user the node authenticates as (etcd's auth enabled; with
    /// --etcd-password-file).
    #[arg(long, value_name = "NAME", requires_all = ["etcd", "etcd_password_file"])]
    pub etcd_user: Option<String>,
    /// File holding --etcd-user's password (surrounding whitespace ignored).
    #[arg(long, value_name = "PATH", requires = "etcd_user")]
    pub etcd_password_file: Option<PathBuf>,
    /// Partitions of a new cluster (kept in etcd: later nodes use its count).
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub partitions: u16,
    /// The node's etcd lease, whole seconds (`5s` or `5`): a node that
    /// cannot renew it stops serving before it runs out.
    #[arg(long, value_name = "SECONDS", default_value = "5s")]
    pub etcd_ttl: String,
    /// The longest ttl or maxHold a HOLD may ask for (`10s`, `2500ms`; a
    /// single server's default 3600s). In a new cluster it is kept in etcd
    /// (default 10s): a partition taken over from a node that stopped
    /// without handing it over grants nothing for this long, so no holder
    /// of the old node can still believe it holds a key.
    #[arg(long, value_name = "DURATION")]
    pub max_ttl: Option<String>,
    /// A connection that has not authenticated within this is closed, so
    /// silent sockets cannot fill --max-connections (`10s`, `2500ms`).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub auth_timeout: String,
    /// Close a connection idle this long (whole seconds; 0 keeps idle
    /// connections; a holder's lease still needs its ttl).
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub timeout: u64,
    /// Answers that may wait for one connection that stopped reading
    /// (`8mb`, `512kb`, bytes); past it the connection is closed and its
    /// keys let go.
    #[arg(long, value_name = "BYTES", default_value = "8mb")]
    pub max_output: String,
    /// Bytes all rows may take (`64mb`); a PUT past it answers LIMIT.
    #[arg(long, value_name = "BYTES", default_value = "64mb")]
    pub max_rows: String,
    /// Fences a partition's owner reserves in etcd at a time (tests make it
    /// small to see windows renewed and spent).
    #[arg(long, hide = true, default_value_t = 1 << 40,
          value_parser = clap::value_parser!(u64).range(2..=1 << 50))]
    pub fence_window: u64,
    /// Grants and ends of leases kept for HISTORY (0: none kept).
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub history: u64,
    /// On SIGTERM a single server refuses new HOLDs and waits this long at
    /// most for its holders to let go, then ends the rest (`30s`, `500ms`).
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub drain_timeout: String,
    /// Appends every grant and end of a lease to PATH as a JSON line,
    /// from a thread of its own (reopened on SIGHUP, as logrotate expects).
    #[arg(long, value_name = "PATH")]
    pub audit_log: Option<PathBuf>,
    /// Where each setting came from (filled in after parsing).
    #[arg(skip)]
    pub sources: Sources,
}

/// Older names of some flags' variables, (variable, flag): weaker than the
/// flag's own variable, stronger than the file.
const ENV_ALIASES: [(&str, &str); 1] = [("HOLDLINE_LOG", "log-level")];

/// The command line, every `serve` flag also read from its variable.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    settings::with_env(Cli::command(), "serve")
}

/// `serve`'s settings from the flags, the variables and `--config`'s file,
/// each knowing where it came from.
pub fn parse(argv: Vec<std::ffi::OsString>) -> Result<ServeArgs, settings::Refusal> {
    let (cli, sources) = settings::parse::<Cli>(command(), "serve", argv, &ENV_ALIASES)?;
    let Command::Serve(mut args) = cli.command;
    args.sources = sources;
    Ok(args)
}

/// Cluster mode's settings, checked.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    pub endpoints: Vec<String>,
    pub cluster: String,
    pub advertise: String,
    pub partitions: u16,
    pub ttl: Duration,
    pub max_ttl: Duration,
    pub fence_window: u64,
    /// How etcd is reached: TLS, a user.
    pub access: EtcdAccess,
}

/// etcd over TLS (`--etcd-cacert`, a client certificate) and as a user.
#[derive(Clone, Debug, Default)]
pub struct EtcdAccess {
    /// The CA's PEM, when etcd speaks TLS.
    pub ca: Option<Vec<u8>>,
    /// The client certificate's and key's PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The user and its password.
    pub user: Option<(String, Password)>,
}

/// A password, never shown by `Debug`.
#[derive(Clone)]
pub struct Password(pub String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(********)")
    }
}

/// What `serve` runs with, checked.
pub struct Config {
    pub listen: SocketAddr,
    /// Who may connect: the users file's, the token's `default`, or
    /// everyone (neither given).
    pub users: Users,
    pub users_file: Option<PathBuf>,
    pub limits: Limits,
    pub max_connections: usize,
    /// Threads serving connections (`--cores`).
    pub cores: usize,
    pub max_frame: usize,
    pub tls: Option<TlsFiles>,
    pub metrics: Option<SocketAddr>,
    pub cluster: Option<ClusterSettings>,
    pub history: usize,
    pub audit_log: Option<PathBuf>,
    /// How long a SIGTERM's drain waits for holders at most.
    pub drain_timeout: Duration,
}

impl ServeArgs {
    /// Resolves the address, reads the token, and refuses a non-loopback
    /// address without a token or client certificates (as Redis's
    /// protected mode does).
    pub fn check(&self) -> Result<Config, String> {
        let listen = resolve(&self.label("listen"), &self.listen)?;
        let token = match &self.token_file {
            None => None,
            Some(path) => Some(read_token(&self.label("token-file"), path)?),
        };
        let users = match (&self.users, &token) {
            (Some(path), _) => users::read_file(path)?,
            (None, Some(token)) => Users::token(token.clone()),
            (None, None) => Users::open(),
        };
        if !users.required() && self.tls_client_ca.is_none() && !listen.ip().is_loopback() {
            return Err(format!(
                "refusing to listen on {listen} without --token-file, --users or --tls-client-ca: \
                 any host that can reach it could take and release every lock. Listen on a \
                 loopback address (127.0.0.1 or ::1), or give --token-file PATH"
            ));
        }
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
                user_from_cn: self.tls_user_from_cn,
            }),
            _ => None,
        };
        let metrics = self
            .metrics
            .as_deref()
            .map(|a| resolve(&self.label("metrics"), a))
            .transpose()?;
        if let Some(at) = metrics.filter(|m| !m.ip().is_loopback() && !users.required()) {
            return Err(format!(
                "refusing to serve metrics on {at} without --token-file or --users: any host \
                 that can reach it could read every lock's name. Serve them on a loopback \
                 address, or give --token-file PATH (scrapers then send an admin's token as \
                 `Authorization: Bearer TOKEN`)"
            ));
        }
        Ok(Config {
            cluster: self.cluster_settings()?,
            metrics,
            listen,
            users,
            users_file: self.users.clone(),
            limits: self.limits()?,
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            cores: self.cores(),
            max_frame: usize::try_from(self.max_frame).unwrap_or(usize::MAX),
            tls,
            history: usize::try_from(self.history).unwrap_or(usize::MAX),
            audit_log: self.audit_log.clone(),
            drain_timeout: duration(&self.label("drain-timeout"), &self.drain_timeout)?,
        })
    }
}

impl ServeArgs {
    /// How an error names setting `long`: its flag, variable or file key.
    pub fn label(&self, long: &str) -> String {
        self.sources.label(long)
    }

    /// `--cores` (or `HOLDLINE_CORES`, ...), else one per CPU.
    fn cores(&self) -> usize {
        match self.cores {
            Some(n) => usize::try_from(n).unwrap_or(1),
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    fn cluster_settings(&self) -> Result<Option<ClusterSettings>, String> {
        let (Some(etcd), Some(cluster), Some(advertise)) =
            (&self.etcd, &self.cluster, &self.advertise)
        else {
            return Ok(None);
        };
        let endpoints: Vec<String> = etcd
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect();
        if endpoints.is_empty() {
            return Err(format!("{} {etcd:?}: no URL", self.label("etcd")));
        }
        let name_ok = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
        if cluster.is_empty() || cluster.len() > 64 || !cluster.chars().all(name_ok) {
            return Err(format!(
                "{} {cluster:?}: 1 to 64 ASCII letters, digits and \"_-.\"",
                self.label("cluster")
            ));
        }
        // Port 0: the port --listen got (a node on `--listen HOST:0`).
        let port_ok = advertise
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            let label = self.label("advertise");
            return Err(format!("{label} {advertise:?}: expected host:port"));
        }
        Ok(Some(ClusterSettings {
            access: self.etcd_access(&endpoints)?,
            endpoints,
            cluster: cluster.clone(),
            advertise: advertise.clone(),
            partitions: self.partitions,
            ttl: etcd_ttl(&self.label("etcd-ttl"), &self.etcd_ttl)?,
            max_ttl: self.max_ttl(CLUSTER_MAX_TTL)?,
            fence_window: self.fence_window,
        }))
    }

    /// The TLS files and the user's password, read; TLS and `https://`
    /// URLs go together.
    fn etcd_access(&self, endpoints: &[String]) -> Result<EtcdAccess, String> {
        let read = |long: &str, path: &Option<PathBuf>| {
            let read = |p: &PathBuf| {
                std::fs::read(p).map_err(|e| format!("{} {}: {e}", self.label(long), p.display()))
            };
            path.as_ref().map(read).transpose()
        };
        let ca = read("etcd-cacert", &self.etcd_cacert)?;
        let https = endpoints
            .iter()
            .filter(|e| e.starts_with("https://"))
            .count();
        if ca.is_some() != (https > 0) || (https > 0 && https < endpoints.len()) {
            return Err(format!(
                "{} {:?}: every URL https:// with --etcd-cacert, none without",
                self.label("etcd"),
                endpoints.join(",")
            ));
        }
        let identity = match (
            read("etcd-cert", &self.etcd_cert)?,
            read("etcd-key", &self.etcd_key)?,
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            _ => None,
        };
        let user = match (&self.etcd_user, &self.etcd_password_file) {
            (Some(user), Some(path)) => {
                let password = read_token(&self.label("etcd-password-file"), path)?;
                let password = String::from_utf8(password).map_err(|_| {
                    format!(
                        "{} {}: not UTF-8",
                        self.label("etcd-password-file"),
                        path.display()
                    )
                })?;
                Some((user.clone(), Password(password)))
            }
            _ => None,
        };
        Ok(EtcdAccess { ca, identity, user })
    }
}

/// `5s` or `5`: whole seconds, 2 to 300 (etcd's leases count seconds, and
/// refuse less than its election timeout allows).
fn etcd_ttl(label: &str, text: &str) -> Result<Duration, String> {
    let digits = text.strip_suffix('s').unwrap_or(text);
    match digits.parse::<u64>() {
        Ok(n) if (2..=300).contains(&n) => Ok(Duration::from_secs(n)),
        _ => Err(format!(
            "{label} {text:?}: expected whole seconds from 2s to 300s"
        )),
    }
}

/// A new cluster's max ttl unless `--max-ttl` says otherwise.
const CLUSTER_MAX_TTL: &str = "10s";
/// A single server's max ttl and maxHold unless `--max-ttl` says otherwise.
const SINGLE_MAX_TTL: &str = "3600s";

/// What one connection may cost, and how long a stranger may stay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub auth_timeout: Duration,
    /// `None`: idle connections stay.
    pub idle_timeout: Option<Duration>,
    pub max_output: usize,
    /// The longest ttl and maxHold a HOLD may ask (a single server's; a
    /// cluster bounds the ttl by its own, kept in etcd).
    pub max_ttl: Duration,
    pub max_rows: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            auth_timeout: Duration::from_secs(10),
            idle_timeout: None,
            max_output: 8 << 20,
            max_ttl: Duration::from_secs(3600),
            max_rows: 64 << 20,
        }
    }
}

impl ServeArgs {
    fn limits(&self) -> Result<Limits, String> {
        Ok(Limits {
            auth_timeout: duration(&self.label("auth-timeout"), &self.auth_timeout)?,
            idle_timeout: (self.timeout > 0).then(|| Duration::from_secs(self.timeout)),
            max_output: bytes(&self.label("max-output"), &self.max_output)?,
            max_ttl: self.max_ttl(SINGLE_MAX_TTL)?,
            max_rows: bytes(&self.label("max-rows"), &self.max_rows)?,
        })
    }

    /// `--max-ttl`, else `default`.
    fn max_ttl(&self, default: &str) -> Result<Duration, String> {
        let text = self.max_ttl.as_deref().unwrap_or(default);
        max_ttl(&self.label("max-ttl"), text)
    }
}

/// `8mb`, `512kb`, `1gb` or plain bytes (at least 1 KiB).
fn bytes(flag: &str, text: &str) -> Result<usize, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, unit) = [("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10), ("b", 1)]
        .iter()
        .find_map(|(suffix, unit)| lower.strip_suffix(suffix).map(|d| (d.to_owned(), *unit)))
        .unwrap_or((lower.clone(), 1));
    match digits
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
    {
        Some(n) if n >= 1024 => Ok(n),
        _ => Err(format!(
            "{flag} {text:?}: expected a size of at least 1kb, such as 8mb or 512kb"
        )),
    }
}

/// `10s` or `2500ms`, more than zero.
fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    let parsed = match text.strip_suffix("ms") {
        Some(ms) => ms.parse().ok().map(Duration::from_millis),
        None => text
            .strip_suffix('s')
            .unwrap_or(text)
            .parse()
            .ok()
            .map(Duration::from_secs),
    };
    parsed
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{flag} {text:?}: expected a duration such as 10s or 2500ms"))
}

/// `10s` or `2500ms`: from 100 ms to an hour.
fn max_ttl(label: &str, text: &str) -> Result<Duration, String> {
    let parsed = match text.strip_suffix("ms") {
        Some(ms) => ms.parse().ok().map(Duration::from_millis),
        None => text
            .strip_suffix('s')
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs),
    };
    match parsed {
        Some(d) if d >= Duration::from_millis(100) && d <= Duration::from_secs(3600) => Ok(d),
        _ => Err(format!(
            "{label} {text:?}: expected a duration from 100ms to 3600s, such as 10s or 2500ms"
        )),
    }
}

fn resolve(flag: &str, addr: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(|e| format!("{flag} {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{flag} {addr}: no address"))
}

/// The token: the file's content without surrounding whitespace, so a
/// trailing newline written by an editor or `echo` does not count.
fn read_token(label: &str, path: &std::path::Path) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{label} {}: {e}", path.display()))?;
    let token = bytes.trim_ascii().to_vec();
    if token.is_empty() {
        return Err(format!("{label} {}: the file is empty", path.display()));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(listen: &str, token_file: Option<PathBuf>) -> ServeArgs {
        ServeArgs {
            config: None,
            print_config: false,
            listen: listen.into(),
            token_file,
            users: None,
            max_connections: 10,
            cores: None,
            max_frame: 1024,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_user_from_cn: false,
            log_level: None,
            log_format: LogFormat::Text,
            metrics: None,
            etcd: None,
            etcd_cacert: None,
            etcd_cert: None,
            etcd_key: None,
            etcd_user: None,
            etcd_password_file: None,
            cluster: None,
            advertise: None,
            partitions: 16,
            etcd_ttl: "5s".into(),
            max_ttl: None,
            auth_timeout: "10s".into(),
            timeout: 0,
            max_output: "8mb".into(),
            max_rows: "64mb".into(),
            fence_window: 1 << 40,
            history: 10_000,
            audit_log: None,
            drain_timeout: "30s".into(),
            sources: Sources::default(),
        }
    }

    /// server/README.md's table names every flag `holdline serve` takes.
    #[test]
    fn the_readme_names_every_flag() {
        let readme = include_str!("../README.md");
        let mut cli = command();
        cli.build();
        let serve = cli.find_subcommand("serve").unwrap();
        let missing: Vec<String> = serve
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .filter(|long| {
                let named = |row: &str| {
                    row.contains(&format!("`--{long} ")) || row.contains(&format!("`--{long}`"))
                };
                *long != "help" && !readme.lines().any(|l| l.starts_with('|') && named(l))
            })
            .map(str::to_owned)
            .collect();
        assert!(
            missing.is_empty(),
            "server/README.md's table lacks {missing:?}"
        );
    }

    #[test]
    fn cores_come_from_the_flag_first() {
        let mut a = args("127.0.0.1:0", None);
        a.cores = Some(3);
        assert_eq!(a.check().unwrap().cores, 3);
    }

    #[test]
    fn cluster_flags_are_checked() {
        let mut a = args("127.0.0.1:0", None);
        a.etcd = Some("http://127.0.0.1:2379".into());
        a.cluster = Some("main".into());
        a.advertise = Some("127.0.0.1:7001".into());
        let c = a.check().unwrap().cluster.unwrap();
        assert_eq!(c.ttl, Duration::from_secs(5));
        assert_eq!(c.endpoints, vec!["http://127.0.0.1:2379".to_string()]);
        a.etcd_ttl = "1500ms".into();
        let err = a.check().err().unwrap();
        assert_eq!(
            err,
            "--etcd-ttl \"1500ms\": expected whole seconds from 2s to 300s"
        );
        a.etcd_ttl = "3".into();
        assert_eq!(
            a.check().unwrap().cluster.unwrap().ttl,
            Duration::from_secs(3)
        );
        a.max_ttl = Some("2500ms".into());
        assert_eq!(
            a.check().unwrap().cluster.unwrap().max_ttl,
            Duration::from_millis(2500)
        );
        a.max_ttl = Some("2h".into());
        assert!(a.check().err().unwrap().starts_with("--max-ttl \"2h\""));
        a.max_ttl = Some("10s".into());
        a.advertise = Some("127.0.0.1".into());
        let err = a.check().err().unwrap();
        assert_eq!(err, "--advertise \"127.0.0.1\": expected host:port");
        a.advertise = Some("127.0.0.1:7001".into());
        a.cluster = Some("a/b".into());
        assert!(a.check().err().unwrap().starts_with("--cluster \"a/b\""));
    }

    #[test]
    fn loopback_needs_no_token_but_other_addresses_do() {
        assert!(args("127.0.0.1:0", None).check().is_ok());
        assert!(args("[::1]:0", None).check().is_ok());
        let err = args("0.0.0.0:7380", None).check().err().unwrap();
        assert!(
            err.starts_with(
                "refusing to listen on 0.0.0.0:7380 without --token-file, --users or --tls-client-ca"
            ),
            "{err}"
        );
    }

    #[test]
    fn the_token_is_read_trimmed_and_must_not_be_empty() {
        let dir = std::env::temp_dir().join(format!("holdline-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let config = args("0.0.0.0:0", Some(file.clone())).check().unwrap();
        let users = &config.users;
        assert!(users.required() && users.authenticate(None, b"s3cret").is_some());
        std::fs::write(&file, " \n").unwrap();
        assert!(args("127.0.0.1:0", Some(file)).check().is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn limits_default_as_documented_and_read_their_units() {
        let a = args("127.0.0.1:0", None);
        assert_eq!(a.check().unwrap().limits, Limits::default());
        let mut a = args("127.0.0.1:0", None);
        a.max_output = "512KB".into();
        a.max_rows = "1gb".into();
        a.auth_timeout = "2500ms".into();
        a.timeout = 30;
        a.max_ttl = Some("60s".into());
        let limits = a.check().unwrap().limits;
        assert_eq!(limits.max_output, 512 << 10);
        assert_eq!(limits.max_rows, 1 << 30);
        assert_eq!(limits.auth_timeout, Duration::from_millis(2500));
        assert_eq!(limits.idle_timeout, Some(Duration::from_secs(30)));
        assert_eq!(limits.max_ttl, Duration::from_secs(60));
        a.max_output = "12".into();
        assert_eq!(
            a.check().err().unwrap(),
            "--max-output \"12\": expected a size of at least 1kb, such as 8mb or 512kb"
        );
    }
}
