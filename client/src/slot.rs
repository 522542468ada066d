//! A key's slot, as Redis Cluster and a holdline cluster hash it:
//! CRC16-XMODEM of the key's text mod 16384, only the part inside the
//! first `{...}` when that part is not empty (a hash tag). The lock's name
//! takes no part.

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
fn crc16(bytes: &[u8]) -> u16 {
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

/// The slot (0-16383) of `key`'s text: what `CLUSTER KEYSLOT key` answers,
/// and where a cluster's client sends a hold of it.
///
/// ```
/// assert_eq!(holdline_client::key_slot("foo"), 12182);
/// assert_eq!(
///     holdline_client::key_slot("{inv-7}:status"),
///     holdline_client::key_slot("inv-7"),
/// );
/// ```
pub fn key_slot(key: &str) -> u16 {
    crc16(hashed(key.as_bytes())) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_clusters_test_vectors() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot(""), 0);
        let user = key_slot("user1000");
        assert_eq!(key_slot("{user1000}.following"), user);
        assert_eq!(key_slot("{user1000}.followers"), user);
        // An empty tag hashes the whole key; only the first `{` counts.
        assert_eq!(
            key_slot("foo{}{bar}"),
            crc16(b"foo{}{bar}") % SLOTS,
            "the whole key"
        );
        assert_ne!(key_slot("foo{}{bar}"), key_slot("bar"));
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        // An unclosed brace is no tag.
        assert_eq!(key_slot("foo{bar"), crc16(b"foo{bar") % SLOTS);
        assert!((0..1000).all(|i| key_slot(&i.to_string()) < SLOTS));
    }
}
