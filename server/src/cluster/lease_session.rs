//! The node's etcd lease while a session lives: kept alive on one
//! keepalive stream, each answer moving the node's deadline (credited to
//! the send time of the request it answers), and a watchdog that stops
//! every partition when the deadline passes though no command comes. Both
//! are tasks of their own, ended with the session ([`AbortOnDrop`]).

use super::etcd::timed;
use super::Node;
use etcd_client::Client;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// Keeps the lease alive: a keepalive every ttl/4 on one stream, each
/// answer credited to the send time of the request it answers (etcd
/// answers a stream's requests in order), so a slow answer still counts
/// for what it proves. A stream with a request unanswered for a ttl is
/// dropped for a new one (whose opening is itself a keepalive). etcd
/// saying the lease is gone ends the session.
pub async fn keep_alive(mut client: Client, node: Arc<Node>, lease: i64) {
    let every = node.ttl / 4;
    loop {
        let sent = node.now();
        let (mut keeper, mut answers) =
            match timed("keepalive", client.lease_keep_alive(lease)).await {
                Ok(stream) => stream,
                Err(why) if why.is_not_found() => {
                    warn!(lease, "etcd says the lease is gone");
                    node.lease_gone(lease);
                    return;
                }
                Err(_) => {
                    tokio::time::sleep(every / 2).await;
                    continue;
                }
            };
        // Opening the stream sent a keepalive and read its answer (alive).
        node.lease_confirmed(lease, sent, node.ttl);
        if !keep_stream(&node, lease, &mut keeper, &mut answers, every).await {
            return;
        }
    }
}

/// One keepalive stream's life: `false` once the lease is gone.
async fn keep_stream(
    node: &Node,
    lease: i64,
    keeper: &mut etcd_client::LeaseKeeper,
    answers: &mut etcd_client::LeaseKeepAliveStream,
    every: Duration,
) -> bool {
    let mut sent: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let stuck = sent
                    .front()
                    .is_some_and(|s| node.now() - s > node.ttl.as_nanos() as u64);
                if stuck {
                    return true;
                }
                sent.push_back(node.now());
                if keeper.keep_alive().await.is_err() {
                    return true;
                }
            }
            answer = answers.message() => match answer {
                Ok(Some(a)) => {
                    let Some(at) = sent.pop_front() else { return true };
                    if a.ttl() <= 0 {
                        warn!(lease, "etcd says the lease is gone");
                        node.lease_gone(lease);
                        return false;
                    }
                    node.lease_confirmed(lease, at, Duration::from_secs(a.ttl() as u64));
                }
                _ => return true,
            },
        }
    }
}

/// Stops every partition when the deadline passes, even if no command
/// comes to check it; ends when the session has no deadline any more.
pub async fn watchdog(node: Arc<Node>) {
    while let Some(deadline) = node.deadline() {
        tokio::time::sleep_until(deadline.into()).await;
        node.check_deadline();
    }
}

/// Ends the keepalive and watchdog tasks with the session, however the session ends.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
