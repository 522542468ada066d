//! A node's claims of partitions in etcd: claiming one together with a
//! fence window (one transaction), reserving the next window at half,
//! handing a stopped partition over (the claim deleted, the hand-over
//! marked, in one transaction), and stopping what etcd no longer shows as
//! ours. Each write is conditioned on the revision it read, so a claim of
//! a tenure that ended changes nothing. The safety argument is in the
//! module doc of `cluster`.

use super::etcd::{timed, EtcdError, Keys};
use super::facts::{Facts, Handed, ImportMark};
use super::{handover, Node, Stopped};
use etcd_client::{Client, Compare, CompareOp, DeleteOptions, PutOptions, Txn, TxnOp};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{debug, info, warn};

/// The node's claims: what it writes to etcd about partitions.
pub struct Claims {
    pub client: Client,
    pub keys: Keys,
    pub node: Arc<Node>,
}

impl Claims {
    /// Stops partitions etcd does not show as ours (claim and all), and
    /// gives up any claim of ours that is not served (a stopped one, or a
    /// claim left by an ended session).
    pub async fn drop_what_etcd_denies(&mut self, facts: &Facts) {
        for part in self.node.served() {
            let ok = matches!(&facts.owners[usize::from(part.index)],
                Some((id, rev)) if *id == self.node.id && *rev == part.claim);
            if !ok {
                warn!(
                    partition = part.index,
                    "etcd no longer shows our claim: stopping"
                );
                self.node.stop(part.index);
            }
        }
        let served: Vec<u16> = self.node.served().iter().map(|p| p.index).collect();
        for (p, owner) in facts.owners.iter().enumerate() {
            if let Some((id, rev)) = owner {
                if *id == self.node.id && !served.contains(&(p as u16)) {
                    let _ = self.delete_claim(p as u16, *rev).await;
                }
            }
        }
    }

    /// Hands over in etcd every partition the node stopped on purpose.
    pub async fn hand_over_stopped(&mut self) -> Result<(), EtcdError> {
        for stopped in self.node.left() {
            self.hand_over(stopped).await?;
        }
        Ok(())
    }

    /// Deletes our claim of a partition we stopped, and marks the hand-over
    /// (`handed/<p>`, in the same transaction, only if no window was
    /// reserved since): the end of our last window, and how long a holder
    /// its close could not tell might still believe, counted from now (the
    /// transaction is sent after, and the next claim comes after it). Every
    /// other holder was told it lost its lease, so the next owner waits
    /// that long only, not the cluster's max ttl.
    ///
    /// With an export, its chunks are written first (under no lease: the
    /// next owner reads them after this node is gone) and the same
    /// transaction marks where they lie (`import/<p>`). Chunks that could
    /// not all be written are named by no mark: the hand-over is today's.
    pub async fn hand_over(&mut self, stopped: Stopped) -> Result<(), EtcdError> {
        let Stopped {
            index: p,
            claim: rev,
            fence_end: end,
            believed_until,
            export,
        } = stopped;
        let import = match export.filter(|e| !e.is_empty()) {
            Some(export) => self.write_export(p, end, &export).await,
            None => None,
        };
        let owner = self.keys.owner(p);
        let fences = self.keys.fences(p);
        let left = believed_until.saturating_duration_since(Instant::now());
        // Whole ms, rounded up: the next owner must not open a moment early.
        let ms = left.as_nanos().div_ceil(1_000_000) as u64;
        let mark = Handed {
            end,
            believed: Duration::from_millis(ms),
        };
        let txn = Txn::new()
            .when([
                Compare::create_revision(owner.clone(), CompareOp::Equal, rev),
                Compare::value(fences, CompareOp::Equal, end.to_string()),
            ])
            .and_then(
                [
                    TxnOp::delete(owner, None),
                    TxnOp::put(self.keys.handed(p), mark.text(), None),
                ]
                .into_iter()
                .chain(
                    import
                        .as_ref()
                        .map(|m| TxnOp::put(self.keys.import(p), m.text(), None)),
                )
                .collect::<Vec<_>>(),
            );
        if timed("txn", self.client.txn(txn)).await?.succeeded() {
            if let Some(m) = import {
                info!(
                    partition = p,
                    chunks = m.chunks,
                    "handed the partition over with its leases"
                );
            }
            return Ok(());
        }
        self.delete_claim(p, rev).await
    }

    /// Writes `export` in chunks under a new id; the mark naming them, or
    /// `None` when a write failed.
    async fn write_export(
        &mut self,
        p: u16,
        end: u64,
        export: &handover::Export,
    ) -> Option<ImportMark> {
        let id = super::new_node_id();
        let base = format!("{}{id}/", self.keys.transfers(p));
        let chunks = export.chunks();
        for (n, chunk) in chunks.iter().enumerate() {
            let put = self.client.put(format!("{base}{n}"), chunk.as_str(), None);
            if let Err(why) = timed("put", put).await {
                warn!(partition = p, %why, "could not write the hand-over's leases: they end");
                return None;
            }
        }
        Some(ImportMark {
            end,
            id,
            chunks: u32::try_from(chunks.len()).ok()?,
        })
    }

    /// The export `mark` names, read whole; `None` when a chunk is missing
    /// or unreadable (the claim then falls back to waiting). Every export
    /// of `p` is deleted after, used or not.
    async fn read_export(&mut self, p: u16, mark: &ImportMark) -> Option<handover::Export> {
        let base = format!("{}{}/", self.keys.transfers(p), mark.id);
        let mut texts = Vec::new();
        for n in 0..mark.chunks {
            let got = timed("get", self.client.get(format!("{base}{n}"), None)).await;
            let text = got.ok()?.kvs().first()?.value_str().ok()?.to_owned();
            texts.push(text);
        }
        handover::Export::from_chunks(texts.iter().map(String::as_str))
    }

    /// Deletes every export left for `p`.
    async fn delete_exports(&mut self, p: u16) {
        let all = DeleteOptions::new().with_prefix();
        let deleted = self.client.delete(self.keys.transfers(p), Some(all));
        if let Err(why) = timed("delete", deleted).await {
            debug!(partition = p, %why, "could not delete old hand-over leases");
        }
    }

    pub async fn delete_claim(&mut self, p: u16, rev: i64) -> Result<(), EtcdError> {
        let key = self.keys.owner(p);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::delete(key, None)]);
        timed("txn", self.client.txn(txn)).await.map(drop)
    }

    /// Claims `p` and reserves a fence window in one transaction; serves it
    /// if etcd granted both.
    pub async fn claim(&mut self, p: u16, facts: &Facts) -> Result<(), EtcdError> {
        let lease = self.node.lease();
        if lease == 0 || self.node.is_leaving() {
            return Ok(());
        }
        let owner = self.keys.owner(p);
        let fences = self.keys.fences(p);
        let (floor, fences_rev) = facts.fences[usize::from(p)].unwrap_or((wall_clock_ns(), 0));
        // Fences travel as signed 64-bit integers: a window must end below.
        let Some(end) = floor
            .checked_add(self.node.window)
            .filter(|&e| e < i64::MAX as u64)
        else {
            warn!(
                partition = p,
                floor, "no fences left below 2^63 (or fences/<p> is not a number): not claiming"
            );
            return Ok(());
        };
        // No lease of this cluster outlives its max ttl: nor need the wait.
        let max_ttl = self.node.max_ttl;
        let quiet = facts.handed_over(p).map_or(max_ttl, |q| q.min(max_ttl));
        let (import, import_rev) = facts.import(p);
        let import = import.filter(|_| !ignores_imports());
        // The claim takes the import mark with it: an export is used by
        // the claim right after its hand-over, never by a later one.
        let txn = Txn::new()
            .when([
                Compare::create_revision(owner.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(fences.clone(), CompareOp::Equal, fences_rev),
                Compare::mod_revision(self.keys.import(p), CompareOp::Equal, import_rev),
            ])
            .and_then([
                TxnOp::put(
                    owner,
                    self.node.id.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::put(fences, end.to_string(), None),
                TxnOp::delete(self.keys.import(p), None),
            ]);
        let resp = timed("claim", self.client.txn(txn)).await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        if !resp.succeeded() {
            return Ok(());
        }
        let export = match &import {
            Some(mark) => self.read_export(p, mark).await,
            None => None,
        };
        if import.is_some() && export.is_none() {
            warn!(
                partition = p,
                "could not read the hand-over's leases: waiting them out"
            );
        }
        // Used or not, and any an earlier hand-over left unmarked (its
        // give-up failed after its chunks were written).
        self.delete_exports(p).await;
        if self.node.check_deadline() {
            let imported = export.is_some();
            self.node.serve(p, floor, revision, quiet, export);
            if quiet.is_zero() || imported {
                info!(partition = p, "serving the partition");
            } else {
                info!(partition = p, wait = ?quiet, "serving the partition once no holder of its last owner can think it holds a key");
            }
        }
        Ok(())
    }

    /// Reserves the next window for every partition past half its own.
    pub async fn reserve_windows(&mut self, facts: &Facts) -> Result<(), EtcdError> {
        for part in self.node.served() {
            if !part.wants_window.load(std::sync::atomic::Ordering::SeqCst) {
                continue;
            }
            let Some((end, rev)) = facts.fences[usize::from(part.index)] else {
                continue;
            };
            let owner = self.keys.owner(part.index);
            let fences = self.keys.fences(part.index);
            let next = end + self.node.window;
            let txn = Txn::new()
                .when([
                    Compare::create_revision(owner, CompareOp::Equal, part.claim),
                    Compare::mod_revision(fences.clone(), CompareOp::Equal, rev),
                ])
                .and_then([TxnOp::put(fences, next.to_string(), None)]);
            if timed("reserve", self.client.txn(txn)).await?.succeeded() {
                self.node.window_reserved(&part, next);
            }
        }
        Ok(())
    }
}

/// Whether this node takes no hand-over's leases, as a node of the
/// release before hand-overs carried them (it neither says it takes them
/// nor reads an import mark): `HOLDLINE_TEST_IGNORE_IMPORTS` set, the
/// version-skew test's stand-in for that release.
pub fn ignores_imports() -> bool {
    std::env::var_os("HOLDLINE_TEST_IGNORE_IMPORTS").is_some()
}

/// Nanoseconds since the Unix epoch: a new partition's first window starts
/// there, level with a single node's fences.
fn wall_clock_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
