//! Which partitions a node should claim or give up, from one reading of
//! etcd: a pure function, so every node computes the same shares from the
//! same facts and the plan is tested without etcd.
//!
//! Shares: live nodes sorted by id; with `n` partitions over `m` nodes the
//! first `n % m` nodes get `n / m + 1`, the rest `n / m`. A node over its
//! share gives up its highest partitions; a node under it claims unowned
//! ones, starting at its own offset so that nodes claiming at the same time
//! mostly reach for different partitions (etcd settles any collision: a
//! claim only succeeds on an unowned partition). Partitions that stay with
//! their owner are never in a plan, so their holders keep their leases.

/// What one node should do now.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub claim: Vec<u16>,
    pub give_up: Vec<u16>,
}

/// The plan for node `me`, given the live nodes' ids (any order) and each
/// partition's owner id (`None`: unowned).
pub fn plan(me: &str, live: &[String], owners: &[Option<String>]) -> Plan {
    let mut nodes: Vec<&str> = live.iter().map(String::as_str).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let Some(rank) = nodes.iter().position(|n| *n == me) else {
        // Not registered (yet, or any more): claim nothing.
        return Plan::default();
    };
    let n = owners.len();
    let m = nodes.len();
    let share = n / m + usize::from(rank < n % m);
    let mine: Vec<u16> = (0..n)
        .filter(|&p| owners[p].as_deref() == Some(me))
        .map(|p| p as u16)
        .collect();
    let mut plan = Plan::default();
    if mine.len() > share {
        plan.give_up = mine[share..].to_vec();
        plan.give_up.reverse();
    } else {
        let offset = rank * n / m;
        plan.claim = (0..n)
            .map(|i| (offset + i) % n)
            .filter(|&p| owners[p].is_none())
            .take(share - mine.len())
            .map(|p| p as u16)
            .collect();
    }
    plan
}

/// Every node's plan applied in turn (by id) until nothing changes, as
/// claims would settle if each node claimed in that order (the first
/// claim of a partition wins): the owners then. A guess of where a
/// partition goes; the real claims race.
pub fn settle(live: &[String], owners: &mut [Option<String>]) -> Vec<Option<String>> {
    let mut nodes: Vec<&String> = live.iter().collect();
    nodes.sort_unstable();
    for _ in 0..owners.len() + 2 {
        let mut changed = false;
        for me in &nodes {
            let p = plan(me, live, owners);
            for g in p.give_up {
                owners[usize::from(g)] = None;
                changed = true;
            }
            for c in p.claim {
                if owners[usize::from(c)].is_none() {
                    owners[usize::from(c)] = Some((*me).clone());
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    owners.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Settles the plans (the module's `settle`) and checks they did:
    /// no node has anything left to claim or give up.
    fn settle(live: &[String], owners: &mut [Option<String>]) {
        super::settle(live, owners);
        for me in live {
            let left = plan(me, live, owners);
            assert_eq!(left, Plan::default(), "the plans never settled: {owners:?}");
        }
    }

    fn counts(live: &[String], owners: &[Option<String>]) -> Vec<usize> {
        live.iter()
            .map(|n| owners.iter().filter(|o| o.as_deref() == Some(n)).count())
            .collect()
    }

    #[test]
    fn partitions_spread_evenly_and_all_are_owned() {
        for (nodes, n) in [(1, 8), (2, 8), (3, 8), (3, 16), (5, 3), (4, 64)] {
            let live: Vec<String> = (0..nodes).map(|i| format!("node{i}")).collect();
            let mut owners = vec![None; n];
            settle(&live, &mut owners);
            assert!(owners.iter().all(Option::is_some), "{owners:?}");
            let c = counts(&live, &owners);
            let (lo, hi) = (c.iter().min().unwrap(), c.iter().max().unwrap());
            assert!(hi - lo <= 1, "{nodes} nodes, {n} partitions: {c:?}");
        }
    }

    #[test]
    fn a_joining_node_takes_only_its_share() {
        let two = ids(&["a", "b"]);
        let mut owners = vec![None; 8];
        settle(&two, &mut owners);
        let before = owners.clone();
        let three = ids(&["a", "b", "c"]);
        settle(&three, &mut owners);
        let moved = (0..8).filter(|&p| owners[p] != before[p]).count();
        assert_eq!(counts(&three, &owners).iter().sum::<usize>(), 8);
        assert_eq!(
            moved,
            counts(&three, &owners)[2],
            "only the new node's share moved"
        );
    }

    #[test]
    fn a_dead_nodes_partitions_go_to_the_living() {
        let three = ids(&["a", "b", "c"]);
        let mut owners = vec![None; 8];
        settle(&three, &mut owners);
        let before = owners.clone();
        for o in owners.iter_mut() {
            if o.as_deref() == Some("b") {
                *o = None;
            }
        }
        let two = ids(&["a", "c"]);
        settle(&two, &mut owners);
        assert_eq!(counts(&two, &owners), vec![4, 4]);
        for p in 0..8 {
            if before[p].as_deref() != Some("b") {
                assert_eq!(owners[p], before[p], "partition {p} of a living node moved");
            }
        }
    }

    #[test]
    fn an_unregistered_node_claims_nothing() {
        assert_eq!(plan("x", &ids(&["a"]), &[None, None]), Plan::default());
    }
}
