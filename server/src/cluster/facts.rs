//! Reading the cluster's keys: one reading ([`Facts`]: live nodes, each
//! partition's owner and claim revision, its reserved fence window, its
//! last clean hand-over) and, between readings, a watch of the keys from
//! the revision after the last one, so a change (an owner's lease running
//! out, a hand-over) is acted on the moment etcd makes it, and nothing is
//! read while nothing changes.

use super::etcd::{timed, EtcdError, Keys};
use super::View;
use etcd_client::{Client, GetOptions, WatchOptions, WatchStream};
use std::time::Duration;

/// One key as read: its name, value and revisions.
pub struct Entry<'a> {
    pub key: &'a str,
    pub value: &'a str,
    pub create_revision: i64,
    pub mod_revision: i64,
}

/// One reading of the cluster's keys.
#[derive(Debug, Default)]
pub struct Facts {
    /// Live nodes: id and address.
    pub nodes: Vec<(String, String)>,
    /// Live nodes that take a hand-over's leases (`handover/<id>`).
    pub takers: Vec<String>,
    /// Each partition's owner id and its claim's revision.
    pub owners: Vec<Option<(String, i64)>>,
    /// Each partition's reserved window end and its key's revision.
    pub fences: Vec<Option<(u64, i64)>>,
    /// Each partition's last hand-over: the window end it was at, and how
    /// long its holders might still believe (see [`Handed`]).
    pub handed: Vec<Option<Handed>>,
    /// Each partition's import mark, with the revision it was written at.
    pub imports: Vec<Option<(ImportMark, i64)>>,
    /// The etcd revision it was read at.
    pub revision: i64,
}

/// A hand-over mark, `handed/<p>`: `END` or `END MS`. The old owner
/// closed the partition's store (every holder pushed `lost`, every waiter
/// `closed`), then wrote the end of its last window and how long, in ms,
/// a holder it could not tell might still think it holds: until the
/// latest end (ttl since the last renewal, or maxHold) of the leases it
/// ended. The next owner grants nothing for that long after its claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handed {
    pub end: u64,
    pub believed: Duration,
}

/// An import mark, `import/<p>`: `END ID CHUNKS`. Written in the
/// transaction that hands `p` over (beside `handed/<p>`, which a node of
/// an earlier release reads alone): the export of the tenure whose window
/// ends at `END` lies in `CHUNKS` keys under the transfers of `p`, `ID/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportMark {
    pub end: u64,
    pub id: String,
    pub chunks: u32,
}

impl ImportMark {
    pub fn text(&self) -> String {
        format!("{} {} {}", self.end, self.id, self.chunks)
    }

    pub fn parse(text: &str) -> Option<ImportMark> {
        let mut words = text.split(' ');
        let end = words.next()?.parse().ok()?;
        let id = words
            .next()
            .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()))?;
        let chunks = words.next()?.parse().ok()?;
        words.next().is_none().then(|| ImportMark {
            end,
            id: id.to_owned(),
            chunks,
        })
    }
}

impl Handed {
    /// The mark's text.
    pub fn text(self) -> String {
        match self.believed.as_millis() {
            0 => self.end.to_string(),
            ms => format!("{} {ms}", self.end),
        }
    }

    /// A mark read back; `None` when it is neither form (read as no
    /// hand-over: the next owner waits the cluster's max ttl).
    pub fn parse(text: &str) -> Option<Handed> {
        let mut words = text.split(' ');
        let end = words.next()?.parse().ok()?;
        let ms = match words.next() {
            Some(ms) => ms.parse().ok()?,
            None => 0,
        };
        let believed = Duration::from_millis(ms);
        words.next().is_none().then_some(Handed { end, believed })
    }
}

impl Facts {
    /// Reads every key under the prefix; the reading's revision is where a
    /// watch for what comes after starts.
    pub async fn get(
        client: &mut Client,
        keys: &Keys,
        partitions: u16,
    ) -> Result<Facts, EtcdError> {
        // Every key of the cluster but the exports (`~transfer/`, last in
        // key order): megabytes that only the next owner reads.
        let options = GetOptions::new().with_range(keys.facts_end());
        let all = timed("get", client.get(keys.prefix.clone(), Some(options))).await?;
        let entries = all.kvs().iter().filter_map(|kv| {
            Some(Entry {
                key: kv.key_str().ok()?,
                value: kv.value_str().ok()?,
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
            })
        });
        let mut facts = Facts::read(&keys.prefix, partitions, entries);
        facts.revision = all.header().map_or(0, |h| h.revision());
        Ok(facts)
    }

    /// The facts `entries` (keys under `prefix`) state; keys of no known
    /// kind, or of a partition past `partitions`, are passed over.
    pub fn read<'a>(
        prefix: &str,
        partitions: u16,
        entries: impl Iterator<Item = Entry<'a>>,
    ) -> Facts {
        let n = usize::from(partitions);
        let mut facts = Facts {
            owners: vec![None; n],
            fences: vec![None; n],
            handed: vec![None; n],
            imports: vec![None; n],
            ..Facts::default()
        };
        for e in entries {
            let Some(rest) = e.key.strip_prefix(prefix) else {
                continue;
            };
            let (kind, name) = rest.split_once('/').unwrap_or((rest, ""));
            let index = name.parse::<usize>().ok().filter(|&p| p < n);
            match (kind, index) {
                ("nodes", _) => facts.nodes.push((name.to_owned(), e.value.to_owned())),
                ("handover", _) => facts.takers.push(name.to_owned()),
                ("owners", Some(p)) => {
                    facts.owners[p] = Some((e.value.to_owned(), e.create_revision))
                }
                ("fences", Some(p)) => {
                    // A value that is not a number leaves no window to use.
                    let end = e.value.parse().unwrap_or(u64::MAX);
                    facts.fences[p] = Some((end, e.mod_revision));
                }
                ("handed", Some(p)) => facts.handed[p] = Handed::parse(e.value),
                ("import", Some(p)) => {
                    facts.imports[p] = ImportMark::parse(e.value).map(|m| (m, e.mod_revision))
                }
                _ => {}
            }
        }
        facts
    }

    /// How long a new owner of `p` grants nothing: what its last owner's
    /// hand-over mark says, if the mark names the window still current (a
    /// later claim would have moved it); zero if no owner ever claimed it;
    /// `None` when it was taken over without a hand-over.
    pub fn handed_over(&self, p: u16) -> Option<Duration> {
        match (self.fences[usize::from(p)], self.handed[usize::from(p)]) {
            (None, _) => Some(Duration::ZERO),
            (Some((end, _)), Some(handed)) if handed.end == end => Some(handed.believed),
            _ => None,
        }
    }

    /// The export the last hand-over of `p` left for its next owner, if
    /// its mark names the window still current (so the hand-over, not a
    /// later tenure, wrote it); and the revision of the import mark (0:
    /// none), which a claim checks is unchanged.
    pub fn import(&self, p: u16) -> (Option<ImportMark>, i64) {
        let Some((mark, rev)) = self.imports[usize::from(p)].clone() else {
            return (None, 0);
        };
        let current = match (self.fences[usize::from(p)], self.handed[usize::from(p)]) {
            (Some((end, _)), Some(handed)) => handed.end == end && mark.end == end,
            _ => false,
        };
        (current.then_some(mark), rev)
    }

    pub fn live(&self) -> Vec<String> {
        self.nodes.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Each partition's owner id, if any.
    pub fn owner_ids(&self) -> Vec<Option<String>> {
        self.owners
            .iter()
            .map(|o| o.as_ref().map(|(id, _)| id.clone()))
            .collect()
    }

    /// What MOVED and CLUSTER SLOTS answer from: owners with addresses.
    pub fn view(&self) -> View {
        let addr = |id: &str| {
            self.nodes
                .iter()
                .find(|(n, _)| n == id)
                .map(|(_, a)| a.clone())
        };
        let mut nodes = self.nodes.clone();
        nodes.sort();
        View {
            nodes,
            takers: self.takers.clone(),
            owners: self
                .owners
                .iter()
                .map(|o| {
                    let (id, _) = o.as_ref()?;
                    Some((id.clone(), addr(id)?))
                })
                .collect(),
        }
    }
}

/// A watch of the cluster's keys from one revision on.
pub struct Changes {
    stream: Option<WatchStream>,
    /// Changes at or below it are known already.
    seen: i64,
}

impl Changes {
    pub fn new() -> Changes {
        Changes {
            stream: None,
            seen: 0,
        }
    }

    /// Everything up to `facts.revision` is known: watch from after it
    /// (a watch already running carries on; etcd orders its events).
    pub async fn read_up_to(&mut self, client: &mut Client, keys: &Keys, facts: &Facts) {
        self.seen = self.seen.max(facts.revision);
        if self.stream.is_some() {
            return;
        }
        let options = WatchOptions::new()
            .with_range(keys.facts_end())
            .with_start_revision(facts.revision + 1);
        // No watch (etcd away) leaves the caller's fallback tick to notice.
        self.stream = timed("watch", client.watch(keys.prefix.clone(), Some(options)))
            .await
            .ok();
    }

    /// Resolves when a key changed after the last reading; a watch that
    /// ends or fails resolves too (the caller reads, then watches anew),
    /// and no watch at all never resolves.
    pub async fn next(&mut self) {
        let Some(stream) = &mut self.stream else {
            return std::future::pending().await;
        };
        loop {
            match stream.message().await {
                Ok(Some(answer)) if answer.canceled() => break,
                Ok(Some(answer)) => {
                    let newest = answer
                        .events()
                        .iter()
                        .filter_map(|e| e.kv().map(|kv| kv.mod_revision()))
                        .max();
                    if newest.is_some_and(|r| r > self.seen) {
                        return;
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        self.stream = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(key: &'a str, value: &'a str, rev: i64) -> Entry<'a> {
        Entry {
            key,
            value,
            create_revision: rev,
            mod_revision: rev + 1,
        }
    }

    fn facts(entries: Vec<Entry<'_>>) -> Facts {
        Facts::read("/holdline/c/", 4, entries.into_iter())
    }

    #[test]
    fn a_reading_names_owners_windows_and_live_nodes() {
        let f = facts(vec![
            entry("/holdline/c/nodes/a", "127.0.0.1:1", 2),
            entry("/holdline/c/nodes/b", "127.0.0.1:2", 3),
            entry("/holdline/c/owners/0", "a", 10),
            entry("/holdline/c/owners/3", "b", 11),
            entry("/holdline/c/owners/9", "b", 12),
            entry("/holdline/c/fences/0", "4096", 20),
            entry("/holdline/c/fences/1", "garbage", 21),
            entry("/holdline/other/owners/1", "x", 5),
            entry("/holdline/c/partitions", "4", 1),
        ]);
        assert_eq!(f.live(), ["a", "b"]);
        assert_eq!(f.owners[0], Some(("a".into(), 10)));
        assert_eq!(f.owners[3], Some(("b".into(), 11)));
        assert_eq!(
            f.owner_ids(),
            [Some("a".into()), None, None, Some("b".into())]
        );
        assert_eq!(f.fences[0], Some((4096, 21)));
        // A window that is not a number leaves nothing to use.
        assert_eq!(f.fences[1], Some((u64::MAX, 22)));
        let view = f.view();
        assert_eq!(view.owners[0], Some(("a".into(), "127.0.0.1:1".into())));
        assert_eq!(view.owners[1], None);
    }

    #[test]
    fn a_hand_over_counts_only_for_the_window_it_names() {
        let zero = Some(Duration::ZERO);
        let never_claimed = facts(vec![]);
        assert_eq!(never_claimed.handed_over(2), zero);
        let handed = facts(vec![
            entry("/holdline/c/fences/2", "8192", 30),
            entry("/holdline/c/handed/2", "8192", 31),
        ]);
        assert_eq!(handed.handed_over(2), zero);
        // Its holders' leases could still be believed for 1.5 s.
        let held = facts(vec![
            entry("/holdline/c/fences/2", "8192", 30),
            entry("/holdline/c/handed/2", "8192 1500", 31),
        ]);
        assert_eq!(held.handed_over(2), Some(Duration::from_millis(1500)));
        // A claim since raised the window: the mark is of an older tenure.
        let claimed_since = facts(vec![
            entry("/holdline/c/fences/2", "12288", 40),
            entry("/holdline/c/handed/2", "8192", 31),
        ]);
        assert_eq!(claimed_since.handed_over(2), None);
        // Claimed, never handed over: its holders may still believe.
        let died = facts(vec![entry("/holdline/c/fences/2", "8192", 30)]);
        assert_eq!(died.handed_over(2), None);
    }

    #[test]
    fn a_hand_over_mark_reads_back_and_a_strange_one_is_none() {
        for believed in [Duration::ZERO, Duration::from_millis(2500)] {
            let mark = Handed {
                end: 8192,
                believed,
            };
            assert_eq!(Handed::parse(&mark.text()), Some(mark));
        }
        assert_eq!(
            Handed {
                end: 7,
                believed: Duration::ZERO
            }
            .text(),
            "7"
        );
        for strange in ["", "x", "8192 ", "8192 x", "8192 1 2", " 8192"] {
            assert_eq!(Handed::parse(strange), None, "{strange:?}");
        }
    }
}
