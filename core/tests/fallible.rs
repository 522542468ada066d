//! Closure holds whose closure can fail: one `?` for the lock's errors and
//! the closure's, as `tx_with` does.

mod common;

use common::{store_with, Holder};
use holdline::{Error, ErrorKind, Store};
use std::time::Duration;

/// A caller's own error, absorbing holdline's.
#[derive(Debug, PartialEq)]
enum AppError {
    Declined,
    Lock(ErrorKind, String),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Lock(e.kind(), e.to_string())
    }
}

#[test]
fn hold_with_answers_the_closures_value_or_its_error() {
    let (_store, lock) = store_with("charges");
    let fence: Result<u64, AppError> = lock.hold_with("inv", |lease| Ok(lease.fence()));
    assert!(fence.unwrap() > 0);
    let declined: Result<u64, AppError> = lock.hold_with("inv", |_| Err(AppError::Declined));
    assert_eq!(declined, Err(AppError::Declined));
    // The key was let go after the closure's error.
    assert!(!lock.inspect("inv").unwrap().held);
}

#[test]
fn the_holds_own_errors_become_the_callers() {
    let (_store, lock) = store_with("charges");
    let holder = Holder::start(&lock, "inv");
    let r: Result<(), AppError> = lock
        .key("inv")
        .wait(Duration::from_millis(20))
        .hold_with(|_| panic!("not run: the key is held"));
    assert_eq!(
        r,
        Err(AppError::Lock(
            ErrorKind::InUse,
            r#"lock charges: key "inv": held past the hold's wait: in use"#.into()
        ))
    );
    let tried: Result<Option<()>, AppError> = lock.try_hold_with("inv", |_| Ok(()));
    assert_eq!(tried, Ok(None));
    holder.release().unwrap();
    let r: Result<Option<()>, AppError> = lock.key("inv").permits(2).try_hold_with(|_| Ok(()));
    assert!(
        matches!(r, Err(AppError::Lock(ErrorKind::Invalid, _))),
        "{r:?}"
    );
}

#[test]
fn a_lost_lease_answers_lost_whatever_the_closure_answered() {
    let store = Store::new();
    let lock = store
        .lock("slow")
        .max_hold(Duration::from_millis(50))
        .open()
        .unwrap();
    let r: Result<&str, AppError> = lock.hold_with("k", |lease| {
        lease.signal().wait_timeout(Duration::from_secs(10));
        Ok("done")
    });
    assert_eq!(
        r,
        Err(AppError::Lock(
            ErrorKind::Lost,
            r#"lock slow: key "k": the lease was lost: it was revoked at its maxHold"#.into()
        ))
    );
}

#[test]
fn try_hold_with_answers_some_value_or_the_closures_error() {
    let (_store, lock) = store_with("tries");
    assert_eq!(
        lock.try_hold_with::<_, _, AppError>("k", |_| Ok(7)),
        Ok(Some(7))
    );
    let r: Result<Option<()>, AppError> = lock.key("k").try_hold_with(|_| Err(AppError::Declined));
    assert_eq!(r, Err(AppError::Declined));
}

#[test]
fn hold_async_with_answers_in_one_question_mark() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (_store, lock) = store_with("tasks");
    rt.block_on(async {
        let run = async || -> Result<u64, AppError> {
            let a = lock
                .hold_async_with("k", async |lease| Ok::<_, AppError>(lease.fence()))
                .await?;
            let b = lock
                .key("k")
                .hold_async_with(async |lease| Ok::<_, AppError>(lease.fence()))
                .await?;
            Ok(b - a)
        };
        assert_eq!(run().await, Ok(1));
        let declined: Result<(), AppError> = lock
            .hold_async_with("k", async |_| Err(AppError::Declined))
            .await;
        assert_eq!(declined, Err(AppError::Declined));
    });
}
