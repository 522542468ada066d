//! [`Outcome`]: a hold's value together with the loss of its lease, for
//! callers that must see what the closure did even when the lease was lost
//! ([`Lock::hold_outcome`](crate::Lock::hold_outcome),
//! [`KeyHold::hold_outcome`](crate::KeyHold::hold_outcome)).

use crate::error::Error;

/// What a hold's closure answered, and whether its lease was lost before
/// the closure returned; from [`Lock::hold_outcome`](crate::Lock::hold_outcome).
///
/// [`Lock::hold`](crate::Lock::hold) turns a loss into `Err` and drops the value; an `Outcome`
/// keeps both, so a side effect made outside the fenced store (a mail sent,
/// a file written) is not invisible when the lease was lost meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an Outcome may carry a lost lease; check `lost`"]
pub struct Outcome<R> {
    /// What the closure answered.
    pub value: R,
    /// `Some` (kind `Lost`, the same text `hold` answers) when the lease was
    /// revoked at its maxHold or its store closed while the closure ran:
    /// another holder may have had the key meanwhile.
    pub lost: Option<Error>,
}

impl<R> Outcome<R> {
    /// Whether the lease was lost while the closure ran.
    pub fn is_lost(&self) -> bool {
        self.lost.is_some()
    }

    /// What [`Lock::hold`](crate::Lock::hold) answers: the value, or the loss (dropping the value).
    pub fn into_result(self) -> Result<R, Error> {
        match self.lost {
            None => Ok(self.value),
            Some(e) => Err(e),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{ErrorKind, Store};
    use std::time::Duration;

    #[test]
    fn an_outcome_without_a_loss_carries_the_value_and_no_error() {
        let store = Store::new();
        let lock = store.lock("mail").open().unwrap();
        let o = lock.hold_outcome("m", |lease| lease.fence()).unwrap();
        assert_eq!(o.lost, None);
        assert!(!o.is_lost());
        let fence = o.value;
        assert_eq!(o.into_result().unwrap(), fence);
    }

    #[test]
    fn a_max_hold_loss_comes_back_with_the_value() {
        let store = Store::new();
        let lock = store
            .lock("mail")
            .max_hold(Duration::from_millis(30))
            .open()
            .unwrap();
        let o = lock
            .key("welcome:7")
            .wait(Duration::from_secs(5))
            .hold_outcome(|lease| {
                assert!(lease.signal().wait_timeout(Duration::from_secs(20)));
                vec!["sent"]
            })
            .unwrap();
        assert_eq!(o.value, ["sent"]);
        assert!(o.is_lost());
        let lost = o.lost.clone().unwrap();
        assert_eq!(lost.kind(), ErrorKind::Lost);
        assert_eq!(
            lost.to_string(),
            "lock mail: key \"welcome:7\": the lease was lost: it was revoked at its maxHold"
        );
        // `into_result` is what `hold` answers: the loss, the value dropped.
        assert_eq!(o.into_result().unwrap_err(), lost);
        // And `hold` itself answers the same error.
        let err = lock
            .hold("welcome:7", |lease| {
                lease.signal().wait_timeout(Duration::from_secs(20));
                "sent"
            })
            .unwrap_err();
        assert_eq!(err, lost);
    }

    #[test]
    fn a_store_closed_while_the_closure_ran_comes_back_with_the_value() {
        let store = Store::new();
        let lock = store.lock("mail").open().unwrap();
        let o = lock
            .hold_outcome("m", |_| {
                store.close();
                42
            })
            .unwrap();
        assert_eq!(o.value, 42);
        assert_eq!(
            o.lost.unwrap().to_string(),
            "lock mail: key \"m\": the lease was lost: its store closed"
        );
    }

    #[test]
    fn a_hold_that_never_ran_is_an_err_not_an_outcome() {
        let store = Store::new();
        let lock = store.lock("mail").open().unwrap();
        let blocker = lock.acquire("m").unwrap();
        let err = lock
            .key("m")
            .wait(Duration::ZERO)
            .hold_outcome(|_| unreachable!("the key is held"))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "lock mail: key \"m\": held past the hold's wait: in use"
        );
        drop(blocker);
    }
}
