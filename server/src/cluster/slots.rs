//! Keys to slots, slots to partitions: Redis Cluster's 16384 slots (so
//! `redis-cli -c` and cluster-aware clients agree with us on where a key
//! lives) cut into `partitions` contiguous ranges, the unit that has one
//! owner at a time.
//!
//! Invariant: the ranges of `0..partitions` cover `0..SLOTS` exactly once,
//! in order, and differ in size by at most one slot.

/// Redis Cluster's slot count.
pub const SLOTS: u16 = 16384;

/// CRC16-XMODEM (polynomial 0x1021, initial 0, no reflection), Redis's.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of `key`: only the part inside its first `{...}` is hashed when
/// that part is not empty, so `{user7}.a` and `{user7}.b` share a slot.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

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
    fn slots_are_redis_clusters() {
        // Redis's own vectors (cluster spec and tests).
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b""), 0);
    }

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
