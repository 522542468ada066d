//! Closure holds whose closure can fail: [`Lock::hold_with`],
//! [`Lock::try_hold_with`], [`Lock::hold_async_with`] and their
//! [`KeyHold`] forms. The closure answers `Result<T, E>` with
//! `E: From<Error>` (as [`Store::tx_with`](crate::Store::tx_with)'s does),
//! and the hold answers `Result<T, E>`: the hold's own error and the
//! closure's meet in one `?`, where [`Lock::hold`] would answer
//! `Result<Result<T, E>, Error>`.

use crate::error::Error;
use crate::key::IntoKey;
use crate::lease::Lease;
use crate::lock::{KeyHold, Lock};

impl Lock {
    /// [`hold`](Lock::hold) for a closure that can fail: answers what `f`
    /// answered, or the hold's error converted into `E`.
    ///
    /// Fails (as `E::from`) as `hold` does: `in use` past the wait, `limit`,
    /// `closed`, `invalid`, and `lost` when the lease was lost while `f`
    /// ran, whatever `f` answered (its value or error is dropped).
    ///
    /// ```
    /// use holdline::Store;
    ///
    /// #[derive(Debug)]
    /// enum ChargeError {
    ///     Declined,
    ///     Lock(holdline::Error),
    /// }
    /// impl From<holdline::Error> for ChargeError {
    ///     fn from(e: holdline::Error) -> Self {
    ///         ChargeError::Lock(e)
    ///     }
    /// }
    ///
    /// let store = Store::new();
    /// let invoices = store.lock("invoices").open()?;
    /// let charge = |amount: u64| -> Result<u64, ChargeError> {
    ///     let fence = invoices.hold_with("inv-9", |lease| {
    ///         if amount > 100 {
    ///             return Err(ChargeError::Declined);
    ///         }
    ///         Ok(lease.fence())
    ///     })?;
    ///     Ok(fence)
    /// };
    /// assert!(charge(5).is_ok());
    /// assert!(matches!(charge(500), Err(ChargeError::Declined)));
    /// # Ok::<(), holdline::Error>(())
    /// ```
    pub fn hold_with<'k, K: IntoKey<'k>, T, E: From<Error>>(
        &self,
        key: K,
        f: impl FnOnce(&Lease<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.hold(key, f)?
    }

    /// [`try_hold`](Lock::try_hold) for a closure that can fail: `Ok(None)`
    /// (and `f` not run) when the key is held. Fails (as `E::from`) as
    /// `try_hold` does (`closed`, `invalid`, `lost`), or with `f`'s error.
    pub fn try_hold_with<'k, K: IntoKey<'k>, T, E: From<Error>>(
        &self,
        key: K,
        f: impl FnOnce(&Lease<'_>) -> Result<T, E>,
    ) -> Result<Option<T>, E> {
        self.try_hold(key, f)?.transpose()
    }

    /// [`hold_async`](Lock::hold_async) for a future that can fail. Fails
    /// (as `E::from`) as `hold_async` does, or with the future's error.
    pub async fn hold_async_with<'k, K: IntoKey<'k>, T, E: From<Error>>(
        &self,
        key: K,
        f: impl AsyncFnOnce(&Lease<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.hold_async(key, f).await?
    }
}

impl KeyHold<'_> {
    /// [`KeyHold::hold`] for a closure that can fail; see
    /// [`Lock::hold_with`]. Fails as it does, and `invalid` for more
    /// permits than the lock has.
    pub fn hold_with<T, E: From<Error>>(
        self,
        f: impl FnOnce(&Lease<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.hold(f)?
    }

    /// [`KeyHold::try_hold`] for a closure that can fail; see
    /// [`Lock::try_hold_with`]. Fails as it does, and `invalid` for more
    /// permits than the lock has.
    pub fn try_hold_with<T, E: From<Error>>(
        self,
        f: impl FnOnce(&Lease<'_>) -> Result<T, E>,
    ) -> Result<Option<T>, E> {
        self.try_hold(f)?.transpose()
    }

    /// [`KeyHold::hold_async`] for a future that can fail; see
    /// [`Lock::hold_async_with`]. Fails as it does, and `invalid` for more
    /// permits than the lock has.
    pub async fn hold_async_with<T, E: From<Error>>(
        self,
        f: impl AsyncFnOnce(&Lease<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.hold_async(f).await?
    }
}
