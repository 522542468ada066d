//! Slots to partitions: Redis Cluster's 16384 slots (a key's slot is the
//! wire format's `key_slot`, so `redis-cli -c` and cluster-aware clients
//! agree with us on where a key lives) cut into `partitions` contiguous
//! ranges, the unit that has one owner at a time.
//!
//! Invariant: the ranges of `0..partitions` cover `0..SLOTS` exactly once,
//! in order, and differ in size by at most one slot.

pub use holdline_resp::slot::{key_slot, SLOTS};

/// The slots `[first, last]` of partition `p` of `n`.
pub fn partition_range(p: u16, n: u16) -> (u16, u16) {
    let first = u32::from(p) * u32::from(SLOTS) / u32::from(n);
    let end = (u32::from(p) + 1) * u32::from(SLOTS) / u32::from(n);
    (first as u16, (end - 1) as u16)
}

/// The partition of `slot` among `n`.
pub fn partition_of(slot: u16, n: u16) -> u16 {
    // The inverse of `partition_range`: the largest p whose first slot is
    // at or below `slot`.
    let p = ((u32::from(slot) + 1) * u32::from(n) - 1) / u32::from(SLOTS);
    p as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_cover_every_slot_once_in_order() {
        for n in [1u16, 2, 3, 7, 8, 16, 100, 1024, 16384] {
            let mut next = 0u32;
            for p in 0..n {
                let (first, last) = partition_range(p, n);
                assert_eq!(u32::from(first), next, "n {n} p {p}");
                assert!(last >= first);
                assert!(u32::from(last - first) + 1 >= u32::from(SLOTS / n));
                assert_eq!(partition_of(first, n), p, "n {n} p {p}");
                assert_eq!(partition_of(last, n), p, "n {n} p {p}");
                next = u32::from(last) + 1;
            }
            assert_eq!(next, u32::from(SLOTS));
        }
    }
}
