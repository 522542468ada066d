//! A key's hash slot, as Redis Cluster and a holdline cluster compute it:
//! CRC16-XMODEM of the key mod 16384, only the part inside the first
//! `{...}` when that part is not empty (a hash tag), so `{user7}.a` and
//! `{user7}.b` share a slot. The server and the Rust client both route by
//! it; it lives with the wire format so that they cannot disagree.

/// How many slots a cluster splits its keys into.
pub const SLOTS: u16 = 16384;

/// CRC16-XMODEM's table (polynomial 0x1021, no reflection), built at
/// compile time.
const TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC16-XMODEM of `bytes` (initial value 0).
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// The bytes that are hashed: those between the first `{` and the first
/// `}` after it when there is at least one, else the whole key.
fn hashed(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let inner = &key[open + 1..];
    match inner.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => &inner[..close],
        _ => key,
    }
}

/// The slot (0-16383) of `key`: what `CLUSTER KEYSLOT key` answers.
///
/// ```
/// use holdline_resp::slot::key_slot;
/// assert_eq!(key_slot(b"foo"), 12182);
/// assert_eq!(key_slot(b"{inv-7}:status"), key_slot(b"inv-7"));
/// ```
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashed(key)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bit at a time, as the polynomial is defined, against the table.
    fn crc16_bitwise(bytes: &[u8]) -> u16 {
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

    #[test]
    fn redis_clusters_test_vectors() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b""), 0);
        let user = key_slot(b"user1000");
        assert_eq!(key_slot(b"{user1000}.following"), user);
        assert_eq!(key_slot(b"{user1000}.followers"), user);
        // An empty tag hashes the whole key; only the first `{` counts.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        // An unclosed brace is no tag.
        assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") % SLOTS);
    }

    #[test]
    fn the_table_is_the_polynomial() {
        for i in 0..=255u8 {
            assert_eq!(crc16(&[i]), crc16_bitwise(&[i]), "{i}");
        }
        let long: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(crc16(&long), crc16_bitwise(&long));
    }
}
