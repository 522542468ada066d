//! The errors a lock's holds answer: each names the lock and the key and
//! says what happened. All are built out of line (they allocate), after
//! any line lock is let go; a hold made after the store closed still
//! answers `invalid` for a bad key first.

use super::{Lock, Mode, MAX_WAITERS};
use crate::ctx::Refusal;
use crate::error::{Error, ErrorKind};
use crate::key::check_key;

impl Lock {
    /// The error of a hold made after the store closed.
    #[cold]
    #[inline(never)]
    pub(crate) fn closed_error(&self, text: &str) -> Error {
        if let Err(e) = check_key(&self.shared.name, text) {
            return e;
        }
        self.error(Error::closed(), text)
    }

    /// What a refusal by the thread's context means for a hold in `mode`:
    /// `Ok` (answer `None`) for a `Try` of a key this thread holds.
    #[cold]
    #[inline(never)]
    pub(crate) fn refused_here(
        &self,
        refusal: Refusal,
        mode: Mode,
        text: &str,
    ) -> Result<(), Error> {
        match refusal {
            Refusal::SameKeyHeld if matches!(mode, Mode::Try) => Ok(()),
            Refusal::SameKeyHeld => Err(self.invalid("hold inside a hold of the same key", text)),
            Refusal::InTransaction => {
                Err(self.invalid("hold inside a transaction: hold first, then begin it", text))
            }
        }
    }

    pub(super) fn refused(&self, kind: ErrorKind, text: &str) -> Error {
        let e = match kind {
            ErrorKind::Limit => Error::new(
                ErrorKind::Limit,
                format!("{MAX_WAITERS} waiters already stand in line"),
            ),
            _ => Error::closed(),
        };
        self.error(e, text)
    }

    pub(super) fn error(&self, e: Error, key: &str) -> Error {
        e.for_key(&self.shared.name, key)
    }

    fn invalid(&self, what: &'static str, key: &str) -> Error {
        self.error(Error::new(ErrorKind::Invalid, what), key)
    }

    pub(super) fn in_use(&self, key: &str) -> Error {
        self.error(
            Error::new(ErrorKind::InUse, "held past the hold's wait"),
            key,
        )
    }
}
