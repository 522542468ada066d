//! Leases: what a holder holds while its grant lasts, and how it learns
//! that the grant was lost. Each concept has its module:
//!
//! - `state`: [`LeaseState`], what one grant shares with the timer and
//!   with signals, and its status machine with its one `end` (the table
//!   of its moves is there).
//! - `closure`: the closure-scoped [`Lease`], which allocates nothing on
//!   the uncontended path: its one `state` word is null, a slot of the
//!   store's maxHold watch, or its `LeaseState`.
//! - `held`: the handle-style [`HeldLease`], for holders outside the
//!   process, renewed within its ttl.
//! - `signal`: the loss [`Signal`], its [`Aborted`] future and the wakers
//!   a lease's end wakes (listed in the store's signal hub).
//! - `loss`: why a lease ended ([`EndReason`]) and how it was lost
//!   (`Loss`), with the `lost` error each says.
//!
//! Whatever times a lease (its watch slot or its state) decides, by one
//! CAS, between the holder and the timer: the winner lets the key go,
//! once; the loser never touches the key's record again.

mod closure;
mod held;
mod loss;
mod signal;
mod state;

pub(crate) use closure::watched_word;
pub use closure::Lease;
pub use held::HeldLease;
pub use loss::EndReason;
pub(crate) use loss::Loss;
pub use signal::{Aborted, Signal};
pub(crate) use state::LeaseState;

use crate::store_core::StoreCore;

/// The store's shared state, with this crate's leases.
pub(crate) type Core = StoreCore<LeaseState>;
