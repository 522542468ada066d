//! `Store::tx_with`: a transaction that ends with the caller's own error
//! rolls back; `Ok` commits; the store's own errors arrive converted.

mod common;

use common::{store_with, store_with_rows};
use holdline::{ErrorKind, Store};

/// A caller's error type: its own failures, and the store's.
#[derive(Debug, PartialEq)]
enum PayError {
    Declined(&'static str),
    Store(ErrorKind, String),
}

impl From<holdline::Error> for PayError {
    fn from(e: holdline::Error) -> Self {
        PayError::Store(e.kind(), e.to_string())
    }
}

fn row(store: &Store, key: &str) -> Option<String> {
    store
        .tx(|tx| Ok(tx.get(key).map(|v| String::from_utf8(v.to_vec()).unwrap())))
        .unwrap()
}

#[test]
fn tx_with_an_err_of_the_callers_type_rolls_back_every_write() {
    let store = store_with_rows(&[("balance", "100"), ("note", "kept")]);
    let r: Result<u32, PayError> = store.tx_with(|tx| {
        tx.put("balance", "60");
        tx.put("receipt:9", "40");
        tx.delete("note");
        // The transaction sees its own writes until it ends.
        assert_eq!(tx.get("balance"), Some(&b"60"[..]));
        Err(PayError::Declined("card declined"))
    });
    assert_eq!(r, Err(PayError::Declined("card declined")));
    assert_eq!(row(&store, "balance").as_deref(), Some("100"));
    assert_eq!(row(&store, "receipt:9"), None);
    assert_eq!(row(&store, "note").as_deref(), Some("kept"));
}

#[test]
fn tx_with_ok_commits_and_answers_the_value() {
    let store = Store::new();
    let r: Result<&str, PayError> = store.tx_with(|tx| {
        tx.put("balance", "60");
        tx.put("receipt:9", "40");
        Ok("charged")
    });
    assert_eq!(r, Ok("charged"));
    assert_eq!(row(&store, "balance").as_deref(), Some("60"));
    assert_eq!(row(&store, "receipt:9").as_deref(), Some("40"));
}

#[test]
fn tx_with_on_a_closed_store_answers_closed_converted() {
    let store = Store::new();
    store.close();
    let r: Result<(), PayError> = store.tx_with(|_| panic!("must not run"));
    assert_eq!(
        r,
        Err(PayError::Store(
            ErrorKind::Closed,
            "store: the store is closed: closed".into()
        ))
    );
}

#[test]
fn tx_with_a_stale_fenced_write_fails_lost_through_question_mark_and_rolls_back() {
    let (store, lock) = store_with("invoices");
    let old = lock.hold("9", |lease| lease.fence()).unwrap();
    let r: Result<(), PayError> = lock
        .hold("9", |lease| {
            store.tx_with(|tx| {
                tx.put("audit", "started");
                // The fence of an earlier, finished grant: refused.
                tx.put_fenced(&lock, "9", old, "invoice:9", "paid")?;
                assert!(old < lease.fence());
                Ok(())
            })
        })
        .unwrap();
    assert_eq!(
        r,
        Err(PayError::Store(
            ErrorKind::Lost,
            format!(
                "lock invoices: key \"9\": the lease was lost: a newer grant holds the key (fence {} > {old})",
                old + 1
            )
        ))
    );
    assert_eq!(row(&store, "audit"), None);
    assert_eq!(row(&store, "invoice:9"), None);
}

#[test]
fn tx_with_inside_a_transaction_is_invalid() {
    let store = Store::new();
    let inner: Result<(), PayError> = store
        .tx(|_| Ok(store.tx_with(|_| -> Result<(), PayError> { Ok(()) })))
        .unwrap();
    assert_eq!(
        inner,
        Err(PayError::Store(
            ErrorKind::Invalid,
            "store: a transaction inside a transaction: invalid".into()
        ))
    );
}

#[test]
fn tx_keeps_its_signature_so_a_bare_ok_infers() {
    let store = Store::new();
    // No type annotations: R is inferred from `Ok(7)`, the error is Error.
    let n = store.tx(|tx| {
        tx.put("k", "v");
        Ok(7)
    });
    assert_eq!(n.unwrap(), 7);
    let e = store
        .tx(|_| -> Result<(), holdline::Error> { Err(store.tx(|_| Ok(())).unwrap_err()) })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
}
