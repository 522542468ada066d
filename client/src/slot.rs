//! A key's slot, as Redis Cluster and a holdline cluster hash it (the
//! wire format's [`holdline_resp::slot`]): the lock's name takes no part.

pub use holdline_resp::slot::SLOTS;

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
    holdline_resp::slot::key_slot(key.as_bytes())
}
