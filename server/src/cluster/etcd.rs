//! Talking to etcd: the names of the cluster's keys, and etcd's errors
//! kept as values (a caller asks an error's gRPC code, never its text),
//! every request bounded in time.
//!
//! Keys under `/holdline/<cluster>/`: `partitions` and `max_ttl_ms`
//! (written once, when the cluster is created), `nodes/<id>` = advertised
//! address and `owners/<p>` = node id (both under the node's lease),
//! `fences/<p>` = the end of the highest fence window reserved and
//! `handed/<p>` = the window end of the last hand-over, and how long, in
//! ms, the next owner grants nothing (`END` or `END MS`; no lease).

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// The longest any one etcd request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a request to etcd did not do what was asked.
#[derive(Debug)]
pub enum EtcdError {
    /// etcd (or the way to it) answered with an error.
    Failed {
        what: &'static str,
        source: etcd_client::Error,
    },
    /// No answer within [`REQUEST_TIMEOUT`].
    NoAnswer { what: &'static str },
    /// A key of the cluster holds what no node writes there.
    Unreadable(String),
}

impl EtcdError {
    /// Whether etcd refused this node for good, not for now: its user or
    /// password was refused, or the TLS handshake failed on a certificate
    /// (a CA that did not sign etcd's, or one etcd does not trust). A
    /// retry cannot help; a node says so at once instead of trying for a
    /// minute.
    pub fn is_refusal(&self) -> bool {
        let EtcdError::Failed { source, .. } = self else {
            return false;
        };
        if let etcd_client::Error::GRpcStatus(status) = source {
            // etcd 3.4 answers a wrong user or password InvalidArgument,
            // "etcdserver: authentication failed, invalid user ID or password".
            return matches!(
                status.code(),
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
            ) || status.message().contains("authentication failed")
                // A TLS handshake that failed on a certificate comes as
                // Unavailable: "invalid peer certificate: UnknownIssuer".
                || status.message().contains("certificate");
        }
        // A TLS failure comes as a transport error whose causes name the
        // certificate (rustls: "invalid peer certificate: UnknownIssuer";
        // etcd's side: "certificate required", "bad certificate").
        let mut cause: Option<&dyn std::error::Error> = Some(source);
        while let Some(e) = cause {
            if e.to_string().contains("certificate") {
                return true;
            }
            cause = e.source();
        }
        false
    }

    /// Whether etcd said the thing asked about does not exist (a lease
    /// that ran out or was revoked).
    pub fn is_not_found(&self) -> bool {
        matches!(self, EtcdError::Failed { source: etcd_client::Error::GRpcStatus(status), .. }
            if status.code() == tonic::Code::NotFound)
    }
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdError::Failed { what, source } => write!(f, "etcd {what}: {source}"),
            EtcdError::NoAnswer { what } => {
                write!(f, "etcd {what}: no answer in {REQUEST_TIMEOUT:?}")
            }
            EtcdError::Unreadable(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for EtcdError {}

/// `f`, or why not, within [`REQUEST_TIMEOUT`].
pub async fn timed<T>(
    what: &'static str,
    f: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(EtcdError::Failed { what, source }),
        Err(_) => Err(EtcdError::NoAnswer { what }),
    }
}

/// The names of one cluster's keys.
#[derive(Clone, Debug)]
pub struct Keys {
    /// `/holdline/<cluster>/`: every key of the cluster starts so.
    pub prefix: String,
}

impl Keys {
    pub fn new(cluster: &str) -> Keys {
        Keys {
            prefix: format!("/holdline/{cluster}/"),
        }
    }

    /// A setting fixed at the cluster's creation (`partitions`, ...).
    pub fn setting(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub fn node(&self, id: &str) -> String {
        format!("{}nodes/{id}", self.prefix)
    }

    pub fn owner(&self, p: u16) -> String {
        format!("{}owners/{p}", self.prefix)
    }

    pub fn fences(&self, p: u16) -> String {
        format!("{}fences/{p}", self.prefix)
    }

    pub fn handed(&self, p: u16) -> String {
        format!("{}handed/{p}", self.prefix)
    }

    /// `handover/<id>`: node `id` takes a hand-over's leases (written
    /// with its registration, under its lease; a node of an earlier
    /// release writes none).
    pub fn taker(&self, id: &str) -> String {
        format!("{}handover/{id}", self.prefix)
    }

    /// `import/<p>`: the export its last hand-over left (see `ImportMark`).
    pub fn import(&self, p: u16) -> String {
        format!("{}import/{p}", self.prefix)
    }

    /// Where partition `p`'s exports lie: one key per chunk,
    /// `<transfers of p><id>/<n>`. Under the prefix (an etcd user granted
    /// it may write them) but after every other key (`~` sorts after
    /// letters), so the range every node reads and watches
    /// ([`Keys::facts_end`]) leaves them out: an export may be megabytes.
    pub fn transfers(&self, p: u16) -> String {
        format!("{}~transfer/{p}/", self.prefix)
    }

    /// The end of the range of keys nodes read and watch: the prefix, up
    /// to the exports.
    pub fn facts_end(&self) -> String {
        format!("{}~", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_under_the_clusters_prefix() {
        let keys = Keys::new("prod");
        assert_eq!(keys.owner(3), "/holdline/prod/owners/3");
        assert_eq!(keys.fences(0), "/holdline/prod/fences/0");
        assert_eq!(keys.handed(7), "/holdline/prod/handed/7");
        assert_eq!(keys.import(7), "/holdline/prod/import/7");
        assert_eq!(keys.transfers(7), "/holdline/prod/~transfer/7/");
        assert!(keys.transfers(7) > keys.facts_end() && keys.node("z") < keys.facts_end());
        assert_eq!(keys.node("ab"), "/holdline/prod/nodes/ab");
        assert_eq!(keys.setting("partitions"), "/holdline/prod/partitions");
    }

    #[test]
    fn not_found_is_read_from_the_grpc_code_not_the_text() {
        let gone = EtcdError::Failed {
            what: "keepalive",
            source: etcd_client::Error::GRpcStatus(tonic::Status::not_found("whatever")),
        };
        assert!(gone.is_not_found());
        let worded = EtcdError::Failed {
            what: "keepalive",
            source: etcd_client::Error::GRpcStatus(tonic::Status::unavailable("not found")),
        };
        assert!(!worded.is_not_found());
        assert!(!EtcdError::NoAnswer { what: "get" }.is_not_found());
        assert_eq!(
            EtcdError::NoAnswer { what: "get" }.to_string(),
            "etcd get: no answer in 2s"
        );
    }
}
