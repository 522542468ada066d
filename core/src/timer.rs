//! A hierarchical timer wheel: 6 levels of 64 slots, 1 ms ticks, O(1) insert
//! and cancel, occupancy bitmaps to find the next deadline.
//!
//! A plain data structure: the store wraps it in a mutex and drives it from
//! its background thread (or, under loom, from a model thread).
//!
//! Invariants (with `elapsed` the time the wheel has been advanced to):
//! - An entry with deadline `d` sits at level `L = msb(d ^ elapsed | 63) / 6`
//!   in slot `(d >> 6L) & 63`: the lowest level whose current cycle holds it.
//! - So every occupied slot of level `L` starts after `elapsed` within the
//!   current level-`L+1` cycle (or, at level 0, at or after `elapsed`), and
//!   the earliest occupied slot of the lowest non-empty level is the next
//!   thing to do. Advancing to a slot of a level above 0 re-inserts its
//!   entries, which then land lower.
//! - Entries live in a slab; a [`TimerKey`] carries the slot's generation, so
//!   cancelling an entry that already fired (or was cancelled) does nothing.

const LEVELS: usize = 6;
const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
/// Deadlines further out than the current top-level cycle (at most this
/// span) are clamped; the entry re-arms when it fires.
pub(crate) const MAX_SPAN_MS: u64 = (1 << (SLOT_BITS * LEVELS as u32)) - 1;
const NONE: u32 = u32::MAX;

/// Names an inserted entry, for cancel.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct TimerKey {
    index: u32,
    generation: u32,
}

impl TimerKey {
    pub(crate) fn pack(self) -> u64 {
        (u64::from(self.index) << 32) | u64::from(self.generation)
    }
    /// `u64::MAX` stands for "no key" and unpacks to `None`.
    pub(crate) fn unpack(v: u64) -> Option<TimerKey> {
        (v != u64::MAX).then_some(TimerKey {
            index: (v >> 32) as u32,
            generation: v as u32,
        })
    }
}

struct Entry<T> {
    value: Option<T>,
    deadline: u64,
    generation: u32,
    level: u8,
    slot: u8,
    prev: u32,
    next: u32,
}

pub(crate) struct Wheel<T> {
    elapsed: u64,
    heads: [[u32; SLOTS]; LEVELS],
    occupied: [u64; LEVELS],
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Wheel<T> {
    pub(crate) fn new() -> Self {
        Wheel {
            elapsed: 0,
            heads: [[NONE; SLOTS]; LEVELS],
            occupied: [0; LEVELS],
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    #[cfg(any(test, loom))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds `value` to fire at `deadline` (ms); a past deadline fires at the
    /// next advance.
    pub(crate) fn insert(&mut self, value: T, deadline: u64) -> TimerKey {
        // Clamped to the end of the top level's current cycle, not merely to
        // `elapsed + MAX_SPAN_MS`: a deadline in the next cycle would need a
        // seventh level. A clamped entry fires early and its owner re-arms it.
        let deadline = deadline.clamp(self.elapsed, self.elapsed | MAX_SPAN_MS);
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.entries.push(Entry {
                    value: None,
                    deadline: 0,
                    generation: 0,
                    level: 0,
                    slot: 0,
                    prev: NONE,
                    next: NONE,
                });
                (self.entries.len() - 1) as u32
            }
        };
        let e = &mut self.entries[index as usize];
        e.value = Some(value);
        e.deadline = deadline;
        self.link(index);
        self.len += 1;
        TimerKey {
            index,
            generation: self.entries[index as usize].generation,
        }
    }

    /// Removes the entry if it is still pending; answers its value.
    pub(crate) fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let e = self.entries.get(key.index as usize)?;
        if e.generation != key.generation || e.value.is_none() {
            return None;
        }
        self.unlink(key.index);
        Some(self.release(key.index))
    }

    /// The earliest pending deadline, if any.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.next_slot().map(|(_, _, start)| start)
    }

    /// Advances to `now`, pushing the values of every entry due by then.
    pub(crate) fn advance(&mut self, now: u64, due: &mut Vec<T>) {
        while let Some((level, slot, start)) = self.next_slot() {
            if start > now {
                break;
            }
            self.elapsed = self.elapsed.max(start);
            let mut i = self.heads[level][slot];
            self.heads[level][slot] = NONE;
            self.occupied[level] &= !(1 << slot);
            while i != NONE {
                let next = self.entries[i as usize].next;
                if self.entries[i as usize].deadline <= now {
                    due.push(self.release(i));
                } else {
                    self.link(i);
                }
                i = next;
            }
        }
        self.elapsed = self.elapsed.max(now);
    }

    /// The lowest level's earliest occupied slot: (level, slot, start ms).
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for level in 0..LEVELS {
            let bits = self.occupied[level];
            if bits == 0 {
                continue;
            }
            let shift = SLOT_BITS * level as u32;
            let slot = bits.trailing_zeros() as usize;
            let cycle_start = self.elapsed & !((1u64 << (shift + SLOT_BITS)) - 1);
            return Some((level, slot, cycle_start + ((slot as u64) << shift)));
        }
        None
    }

    fn link(&mut self, index: u32) {
        let deadline = self.entries[index as usize].deadline.max(self.elapsed);
        let masked = (deadline ^ self.elapsed) | (SLOTS as u64 - 1);
        let level = ((63 - masked.leading_zeros()) / SLOT_BITS) as usize;
        let slot = ((deadline >> (SLOT_BITS * level as u32)) & (SLOTS as u64 - 1)) as usize;
        let head = self.heads[level][slot];
        {
            let e = &mut self.entries[index as usize];
            e.deadline = deadline;
            e.level = level as u8;
            e.slot = slot as u8;
            e.prev = NONE;
            e.next = head;
        }
        if head != NONE {
            self.entries[head as usize].prev = index;
        }
        self.heads[level][slot] = index;
        self.occupied[level] |= 1 << slot;
    }

    fn unlink(&mut self, index: u32) {
        let (level, slot, prev, next) = {
            let e = &self.entries[index as usize];
            (e.level as usize, e.slot as usize, e.prev, e.next)
        };
        if prev == NONE {
            self.heads[level][slot] = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next != NONE {
            self.entries[next as usize].prev = prev;
        }
        if self.heads[level][slot] == NONE {
            self.occupied[level] &= !(1 << slot);
        }
    }

    /// Frees a (now unlinked) slab entry and answers its value.
    fn release(&mut self, index: u32) -> T {
        let e = &mut self.entries[index as usize];
        e.generation = e.generation.wrapping_add(1);
        let value = e.value.take().expect("a linked timer entry has a value");
        self.free.push(index);
        self.len -= 1;
        value
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn fires_in_order_and_cancels() {
        let mut w = Wheel::new();
        let a = w.insert("a", 5);
        w.insert("b", 70);
        w.insert("c", 5000);
        let d = w.insert("d", 300_000);
        assert_eq!(w.next_deadline(), Some(5));
        assert_eq!(w.cancel(a), Some("a"));
        assert_eq!(w.cancel(a), None);
        let mut due = vec![];
        w.advance(69, &mut due);
        assert!(due.is_empty());
        w.advance(70, &mut due);
        assert_eq!(due, ["b"]);
        w.advance(4999, &mut due);
        assert_eq!(due, ["b"]);
        w.advance(5000, &mut due);
        assert_eq!(due, ["b", "c"]);
        assert_eq!(w.cancel(d), Some("d"));
        assert_eq!(w.len(), 0);
        assert_eq!(w.next_deadline(), None);
    }

    proptest! {
        /// Against a sorted map: every entry fires exactly at the first
        /// advance at or past its deadline, never early, and cancels stick.
        #[test]
        fn matches_a_sorted_model(ops in proptest::collection::vec((0u8..4, 0u64..200_000), 1..200)) {
            let mut w = Wheel::new();
            let mut model: BTreeMap<u32, u64> = BTreeMap::new();
            let mut keys = Vec::new();
            let mut now = 0u64;
            let mut id = 0u32;
            for (op, x) in ops {
                match op {
                    0 | 1 => {
                        let deadline = now + x % if op == 0 { 100 } else { 200_000 };
                        keys.push((id, w.insert(id, deadline)));
                        model.insert(id, deadline);
                        id += 1;
                    }
                    2 if !keys.is_empty() => {
                        let (i, k) = keys.swap_remove(x as usize % keys.len());
                        prop_assert_eq!(w.cancel(k), model.remove(&i).map(|_| i));
                    }
                    _ => {
                        now += x % 5000;
                        let mut due = vec![];
                        w.advance(now, &mut due);
                        due.sort();
                        let want: Vec<u32> = model.iter().filter(|(_, &d)| d <= now).map(|(&i, _)| i).collect();
                        for i in &want { model.remove(i); }
                        prop_assert_eq!(due, want);
                        // The wheel may wake early (a slot's start), never late.
                        let next = model.values().min().copied();
                        prop_assert_eq!(w.next_deadline().is_some(), next.is_some());
                        if let (Some(got), Some(want)) = (w.next_deadline(), next) {
                            prop_assert!(got <= want.max(now), "{} > {}", got, want);
                        }
                    }
                }
                prop_assert_eq!(w.len(), model.len());
            }
        }
    }
}
