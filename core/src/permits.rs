//! The book of a key of a lock of several permits: how many of its permits
//! are held, and by which grants.
//!
//! A lock of one permit needs no book: its state word's `HELD` bit says
//! everything. A lock of `total > 1` permits gives each of its records a
//! [`Holding`], read and written only by the owner of the record's line
//! lock, so every grant and release of such a key is one short critical
//! section that also serves the line.
//!
//! Invariants:
//! - `held` is the sum of the grants' permits, and never exceeds `total`.
//! - `grants` is in fence order: grants are booked under the line lock
//!   with rising fences, so a release finds its grant by binary search and
//!   the highest current fence is the last one.

/// One current grant: its fence and how many permits it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Booked {
    pub(crate) fence: u64,
    pub(crate) permits: u32,
}

/// The permits of one key held now, and by whom.
#[derive(Debug)]
pub(crate) struct Holding {
    total: u32,
    held: u32,
    grants: Vec<Booked>,
}

impl Holding {
    /// A book whose first grant takes `permits` of `total` with `fence`.
    pub(crate) fn first(total: u32, fence: u64, permits: u32) -> Holding {
        debug_assert!(permits >= 1 && permits <= total);
        Holding {
            total,
            held: permits,
            grants: vec![Booked { fence, permits }],
        }
    }

    /// Whether `permits` more fit beside those held now.
    #[inline]
    pub(crate) fn fits(&self, permits: u32) -> bool {
        // Mutant for loom-tests/README.md: a grant past the count.
        if cfg!(holdline_mutant = "grant_past_count") {
            return true;
        }
        permits <= self.total - self.held
    }

    /// Books a grant of `permits` with `fence` (greater than every booked one).
    pub(crate) fn book(&mut self, fence: u64, permits: u32) {
        debug_assert!(self.fits(permits));
        debug_assert!(self.grants.last().is_none_or(|b| b.fence < fence));
        self.held += permits;
        self.grants.push(Booked { fence, permits });
    }

    /// Ends the grant with `fence`; answers its permits (`None`: no such
    /// grant, which the one-release rule never lets happen).
    pub(crate) fn end(&mut self, fence: u64) -> Option<u32> {
        let at = self.grants.binary_search_by_key(&fence, |b| b.fence).ok()?;
        let Booked { permits, .. } = self.grants.remove(at);
        self.held -= permits;
        if self.grants.is_empty() && self.grants.capacity() > 8 {
            // A burst of holders leaves no standing allocation behind it.
            self.grants = Vec::new();
        }
        Some(permits)
    }

    /// How many grants hold the key.
    pub(crate) fn holders(&self) -> u32 {
        self.grants.len() as u32
    }

    /// How many permits they hold in all.
    pub(crate) fn held(&self) -> u32 {
        self.held
    }

    /// The current grants, oldest first.
    pub(crate) fn grants(&self) -> &[Booked] {
        &self.grants
    }

    /// Whether the grant with `fence` holds the key now.
    pub(crate) fn has(&self, fence: u64) -> bool {
        self.grants
            .binary_search_by_key(&fence, |b| b.fence)
            .is_ok()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of books and ends keeps `held` the sum of the
        /// grants' permits, within the count, and the grants in fence order.
        #[test]
        fn the_book_adds_up(ops in proptest::collection::vec((any::<bool>(), 1u32..6, 0usize..8), 1..200)) {
            let mut book = Holding::first(8, 1, 1);
            let mut fence = 1;
            for (grant, permits, pick) in ops {
                if grant && book.fits(permits) {
                    fence += 1;
                    book.book(fence, permits);
                } else if !book.grants.is_empty() {
                    let f = book.grants[pick % book.grants.len()].fence;
                    prop_assert!(book.end(f).is_some());
                    prop_assert!(!book.has(f));
                }
                let sum: u32 = book.grants.iter().map(|b| b.permits).sum();
                prop_assert_eq!(book.held(), sum);
                prop_assert!(book.held() <= 8);
                prop_assert!(book.grants.windows(2).all(|w| w[0].fence < w[1].fence));
            }
        }
    }

    #[test]
    fn an_unknown_fence_ends_nothing() {
        let mut book = Holding::first(4, 10, 2);
        assert_eq!(book.end(9), None);
        assert_eq!(book.held(), 2);
        assert_eq!(book.end(10), Some(2));
        assert_eq!((book.held(), book.holders()), (0, 0));
    }
}
