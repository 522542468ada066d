//! A record's key text ([`KeyText`]): inline in the record when short,
//! so a lookup compares it without another dependent load and making the
//! record allocates once; on the heap when long. Inline keys compare a
//! word at a time ([`short_eq`]), as every lookup does.

/// Keys up to this many bytes live inside the record: a lookup compares
/// them without another dependent load, and making the record allocates once.
const INLINE_KEY: usize = 22;

/// A record's key text: inline when short, else on the heap. 24 bytes.
pub(crate) enum KeyText {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Heap(Box<str>),
}

impl KeyText {
    pub(super) fn new(key: &str) -> KeyText {
        if key.len() <= INLINE_KEY {
            let mut bytes = [0; INLINE_KEY];
            bytes[..key.len()].copy_from_slice(key.as_bytes());
            KeyText::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            KeyText::Heap(key.into())
        }
    }

    /// Whether this is the text of `key`. Inline keys are compared a word
    /// at a time, without a call to `memcmp` (it is on every lookup).
    #[inline]
    pub(crate) fn is(&self, key: &str) -> bool {
        match self {
            KeyText::Inline { len, bytes } => {
                usize::from(*len) == key.len() && short_eq(bytes, key.as_bytes())
            }
            KeyText::Heap(text) => text.as_bytes() == key.as_bytes(),
        }
    }
}

/// Whether the first `b.len()` bytes of `a` are `b` (`b` 1 to
/// [`INLINE_KEY`] bytes long), in at most three overlapping word compares.
#[inline]
fn short_eq(a: &[u8; INLINE_KEY], b: &[u8]) -> bool {
    let n = b.len();
    debug_assert!((1..=INLINE_KEY).contains(&n));
    let word = |s: &[u8], at: usize| -> u64 {
        let mut w = [0; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    };
    let half = |s: &[u8], at: usize| -> u32 {
        let mut w = [0; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_ne_bytes(w)
    };
    if n >= 8 {
        // [0, 8), [n - 8, n), and [8, 16) when more than 16: every byte.
        word(a, 0) == word(b, 0)
            && word(a, n - 8) == word(b, n - 8)
            && (n <= 16 || word(a, 8) == word(b, 8))
    } else if n >= 4 {
        half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4)
    } else {
        // 1 to 3 bytes: the first, the middle and the last cover them.
        n != 0 && a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn inline_keys_compare_byte_for_byte() {
        let texts: Vec<String> = (1..=40)
            .map(|n| (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect())
            .collect();
        for t in &texts {
            let k = KeyText::new(t);
            assert!(k.is(t), "{t}");
            // Every one-byte change, at every position, is another key.
            for i in 0..t.len() {
                let mut other = t.clone().into_bytes();
                other[i] = b'Z';
                let other = String::from_utf8(other).unwrap();
                assert!(!k.is(&other), "{t} vs {other}");
            }
            for u in &texts {
                assert_eq!(k.is(u), t == u, "{t} vs {u}");
            }
        }
    }
}
