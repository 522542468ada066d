//! Why a lease ended ([`EndReason`]) and how it was lost ([`Loss`]): the
//! `lost` error each loss says. A lease released by its holder is not
//! lost; every other end is.

use crate::error::Error;
use crate::hold_watch::Ended;

/// Why a lease ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EndReason {
    /// Its holder let it go.
    Released,
    /// The store revoked it at its `maxHold`.
    Revoked,
    /// Its holder stopped renewing and it ran out at its `ttl`.
    Expired,
    /// Its store closed.
    StoreClosed,
}

/// How a lease was lost: what its `lost` error says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Loss {
    /// Revoked at its maxHold.
    Revoked,
    /// Ran out at its ttl.
    Expired { ttl_ms: u64 },
    /// Its store closed.
    StoreClosed,
}

impl From<Ended> for Loss {
    fn from(ended: Ended) -> Loss {
        match ended {
            Ended::Revoked => Loss::Revoked,
            Ended::Closed => Loss::StoreClosed,
        }
    }
}

impl Loss {
    /// The error the holder of `key` of lock `lock` gets.
    #[cold]
    pub(crate) fn error_for(self, lock: &str, key: &str) -> Error {
        self.error().for_key(lock, key)
    }

    /// The error a holder gets, before its lock and key are named.
    pub(crate) fn error(self) -> Error {
        match self {
            Loss::Revoked => Error::lost("it was revoked at its maxHold"),
            Loss::Expired { ttl_ms } => {
                Error::lost(format!("it ran out (ttl {})", show_ms(ttl_ms)))
            }
            Loss::StoreClosed => Error::lost("its store closed"),
        }
    }
}

/// `10s`, `1500ms`, `2m`: the shortest exact form.
pub(crate) fn show_ms(ms: u64) -> String {
    if ms != 0 && ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}
