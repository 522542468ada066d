//! An intrusive circular doubly-linked list, known by its tail alone: the
//! shape of a key's line of waiters (`record/line_links.rs`), kept here so
//! that it is generic and tested on its own.
//!
//! What it owns: a [`List`] owns one pointer, its tail (null when empty),
//! and, while a node is linked, that node's [`Pointers`] (its `prev` and
//! `next`). It owns no node: nodes live wherever their owners put them (a
//! waiting thread's stack, a pinned future) and embed a [`Pointers`], which
//! they hand the list through [`Link`]. Nothing allocates.
//!
//! Invariants, with `n` nodes linked:
//! - `n == 0` exactly when the tail is null;
//! - the list is circular: following `next` from the tail visits every
//!   linked node once and comes back to the tail, `prev` goes round the
//!   other way, and the head (the first, the one [`List::pop_front`]
//!   answers) is the tail's `next`; a lone node is its own `prev` and
//!   `next`;
//! - a node is linked into at most one list at a time;
//! - a linked node neither moves nor is freed until it is unlinked (the
//!   callers of [`List::push_back`] promise it; `Pin` says half of it);
//! - only the list reads or writes a node's [`Pointers`], and it writes
//!   them only through `&mut List`. The list is plain data (neither `Send`
//!   nor `Sync`): one shared between threads sits in a cell whose users
//!   take turns, as a record's line does under its `QLOCK` bit, so that
//!   exactly one thread at a time forms a reference to it.
//!
//! An unlinked node's pointers are left as they were (stale): nobody reads
//! them, and clearing them would cost two writes on every unlink.
//!
//! The pointer cells are [`crate::sync::UnsafeCell`]s, so under loom every
//! read and write of a link is checked like any other shared access.

use std::marker::PhantomPinned;
use std::pin::Pin;
use std::ptr;

use crate::sync::UnsafeCell;

/// The links a node embeds to stand in a [`List`]: written only by the
/// list the node is linked into (see the module's invariants).
///
/// It is `!Unpin`, and so is every node that embeds it: a linked node's
/// owner may still hold a `&mut` to what encloses it (a task's future in
/// its `poll`) while the list's user writes its links from another
/// thread, and a `&mut` to a `!Unpin` value does not promise the compiler
/// that nobody else reads or writes through it.
pub(crate) struct Pointers<T> {
    prev: UnsafeCell<*const T>,
    next: UnsafeCell<*const T>,
    _pinned: PhantomPinned,
}

impl<T> Pointers<T> {
    /// Links for a node not yet in any list.
    #[inline]
    pub(crate) fn new() -> Self {
        Self {
            prev: UnsafeCell::new(ptr::null()),
            next: UnsafeCell::new(ptr::null()),
            _pinned: PhantomPinned,
        }
    }

    /// # Safety
    /// No write to these links runs at the same time (the list's user holds
    /// it, as the module doc says).
    #[inline(always)]
    unsafe fn prev(&self) -> *const T {
        // SAFETY: no concurrent write, by the caller's contract.
        self.prev.with(|p| unsafe { *p })
    }

    /// # Safety
    /// As for [`Pointers::prev`].
    #[inline(always)]
    unsafe fn next(&self) -> *const T {
        // SAFETY: no concurrent write, by the caller's contract.
        self.next.with(|n| unsafe { *n })
    }

    /// # Safety
    /// No other access to these links runs at the same time.
    #[inline(always)]
    unsafe fn set_prev(&self, to: *const T) {
        // SAFETY: exclusive access, by the caller's contract.
        self.prev.with_mut(|p| unsafe { *p = to });
    }

    /// # Safety
    /// As for [`Pointers::set_prev`].
    #[inline(always)]
    unsafe fn set_next(&self, to: *const T) {
        // SAFETY: exclusive access, by the caller's contract.
        self.next.with_mut(|n| unsafe { *n = to });
    }
}

/// Under loom a node's end is a write to both its links, so a thread that
/// touches a node after its owner may have freed it (a granter after it
/// published the waiter's final status) is reported as a causality
/// violation rather than missed.
#[cfg(loom)]
impl<T> Drop for Pointers<T> {
    fn drop(&mut self) {
        self.prev.with_mut(|_| ());
        self.next.with_mut(|_| ());
    }
}

/// A node that can stand in a [`List`]: it embeds a [`Pointers`] and says
/// where.
///
/// The list finds a node's links from a raw pointer, never a reference to
/// the whole node, so it claims nothing about the node's other fields
/// (which its owner may be using).
///
/// # Safety
/// `pointers(node)` answers a pointer to the [`Pointers`] embedded in
/// `*node`: the same one on every call, and no other node's. Nothing but
/// the list reads or writes them.
pub(crate) unsafe trait Link: Sized {
    /// Where `node`'s links are, without forming a reference to `*node`
    /// (`&raw const (*node).field`).
    ///
    /// # Safety
    /// `node` points to a live `Self`.
    unsafe fn pointers(node: *const Self) -> *const Pointers<Self>;
}

/// A circular doubly-linked list of `T`s, known by its tail (the head is
/// the tail's `next`): one pointer. See the module doc for its invariants.
pub(crate) struct List<T: Link> {
    tail: *const T,
}

/// The links of a node (a reference to them alone, not to the node).
///
/// # Safety
/// `node` is alive for `'a` (a linked node is, by the list's invariants).
#[inline(always)]
unsafe fn links<'a, T: Link>(node: *const T) -> &'a Pointers<T> {
    // SAFETY: the node is alive for 'a, by the caller's contract, and
    // `Link` answers a pointer into it.
    unsafe { &*T::pointers(node) }
}

impl<T: Link> List<T> {
    /// An empty list.
    #[inline]
    pub(crate) const fn new() -> Self {
        Self { tail: ptr::null() }
    }

    /// Whether no node is linked.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.tail.is_null()
    }

    /// The first node (the next [`pop_front`](List::pop_front) answers it),
    /// left linked.
    ///
    /// # Safety
    /// The list is not empty.
    #[inline]
    pub(crate) unsafe fn head(&self) -> *const T {
        debug_assert!(!self.is_empty(), "the head of an empty list");
        // SAFETY: not empty, so the tail is linked; `&self` rules out a
        // write to any linked node's links (they are written only through
        // `&mut List`).
        unsafe { links(self.tail).next() }
    }

    /// The last node, left linked.
    #[inline]
    pub(crate) fn tail(&self) -> *const T {
        self.tail
    }

    /// Links `node` at the back: it becomes the tail, after every node
    /// linked before it.
    ///
    /// # Safety
    /// `node` is linked into no list, and stays where it is, alive, until
    /// it is unlinked from this one (by [`pop_front`](List::pop_front) or
    /// [`unlink`](List::unlink)).
    #[inline]
    pub(crate) unsafe fn push_back(&mut self, node: Pin<&T>) {
        let np: *const T = node.get_ref();
        // SAFETY: `node` is borrowed, so alive, while we use its links.
        let own = unsafe { links(np) };
        let tail = self.tail;
        // SAFETY: `&mut self` gives exclusive access to the list's links,
        // and `node`'s are ours once the caller says it is in no list; a
        // non-null tail is linked, so alive, and so is its `next`.
        unsafe {
            if tail.is_null() {
                own.set_prev(np);
                own.set_next(np);
            } else {
                let tail_links = links(tail);
                let head = tail_links.next();
                own.set_prev(tail);
                own.set_next(head);
                tail_links.set_next(np);
                links(head).set_prev(np);
            }
        }
        self.tail = np;
    }

    /// Unlinks the first node; answers it and whether the list is now
    /// empty.
    ///
    /// # Safety
    /// The list is not empty.
    #[inline]
    pub(crate) unsafe fn pop_front(&mut self) -> (*const T, bool) {
        // SAFETY: not empty, by the caller's contract.
        let head = unsafe { self.head() };
        // SAFETY: the head is linked into this list, so alive.
        let now_empty = unsafe { self.unlink(&*head) };
        (head, now_empty)
    }

    /// Unlinks `node` from wherever it stands; answers whether the list is
    /// now empty. Its neighbours close up around it, in order.
    ///
    /// # Safety
    /// `node` is linked into this list.
    #[inline]
    pub(crate) unsafe fn unlink(&mut self, node: &T) -> bool {
        debug_assert!(!self.is_empty(), "an unlink from an empty list");
        let np: *const T = node;
        // SAFETY: `node` is borrowed, so alive, while we use its links.
        let own = unsafe { links(np) };
        // SAFETY: `&mut self` gives exclusive access to the list's links;
        // `node` is linked here (the caller's contract), so its neighbours
        // are linked here too, and alive.
        unsafe {
            let prev = own.prev();
            let next = own.next();
            if next == np {
                // The only one.
                self.tail = ptr::null();
                return true;
            }
            links(prev).set_next(next);
            links(next).set_prev(prev);
            if self.tail == np {
                self.tail = prev;
            }
        }
        false
    }

    /// Moves the head to the tail (the order is a circle: the old second
    /// becomes the head); answers the node moved. After `n` turns of a list
    /// of `n`, the order is as it was; every node stays linked throughout.
    ///
    /// # Safety
    /// The list is not empty.
    #[inline]
    pub(crate) unsafe fn rotate(&mut self) -> *const T {
        // SAFETY: not empty, by the caller's contract.
        let head = unsafe { self.head() };
        self.tail = head;
        head
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    struct Node {
        links: Pointers<Node>,
        id: usize,
    }

    // SAFETY: `links` is the node's own, answered on every call.
    unsafe impl Link for Node {
        unsafe fn pointers(node: *const Self) -> *const Pointers<Self> {
            // SAFETY: `node` is live (the caller's contract); no reference
            // is formed.
            unsafe { &raw const (*node).links }
        }
    }

    /// `n` nodes, boxed and pinned before any is linked; the vector is
    /// never touched again but to borrow them, so none moves.
    fn nodes(n: usize) -> Vec<Pin<Box<Node>>> {
        (0..n)
            .map(|id| {
                Box::pin(Node {
                    links: Pointers::new(),
                    id,
                })
            })
            .collect()
    }

    fn id(p: *const Node) -> usize {
        // SAFETY: tests only ask of nodes in their pinned vector.
        unsafe { (*p).id }
    }

    /// The list's order, head first, read forwards; checked backwards too,
    /// and that the walk closes its circle and the tail is the last.
    fn order(list: &List<Node>) -> Vec<usize> {
        if list.is_empty() {
            return Vec::new();
        }
        let mut ids = Vec::new();
        // SAFETY: not empty; every linked node is alive in its vector.
        unsafe {
            let head = list.head();
            let mut at = head;
            loop {
                ids.push(id(at));
                assert!(ids.len() <= 64, "no circle back to the head");
                at = links(at).next();
                if at == head {
                    break;
                }
            }
            assert_eq!(id(list.tail), *ids.last().unwrap(), "the tail is last");
            let mut back = Vec::new();
            let mut at = list.tail;
            for _ in 0..ids.len() {
                back.push(id(at));
                at = links(at).prev();
            }
            assert_eq!(at, list.tail, "prev closes the circle too");
            back.reverse();
            assert_eq!(back, ids, "prev is next backwards");
        }
        ids
    }

    /// A list of nodes `0..len` of `ns`, in order.
    fn filled(ns: &[Pin<Box<Node>>], len: usize) -> List<Node> {
        let mut list = List::new();
        for n in &ns[..len] {
            // SAFETY: unlinked, pinned, and outlives the list.
            unsafe { list.push_back(n.as_ref()) };
        }
        list
    }

    #[test]
    fn one_pointer_and_two() {
        assert_eq!(size_of::<List<Node>>(), size_of::<usize>());
        assert_eq!(size_of::<Pointers<Node>>(), 2 * size_of::<usize>());
    }

    #[test]
    fn push_back_at_sizes_0_to_3() {
        let ns = nodes(4);
        let mut list = List::new();
        assert!(list.is_empty());
        assert_eq!(order(&list), [0; 0]);
        for (len, n) in ns.iter().enumerate() {
            // SAFETY: node `len` is unlinked, pinned, outlives the list.
            unsafe { list.push_back(n.as_ref()) };
            assert!(!list.is_empty());
            assert_eq!(order(&list), (0..=len).collect::<Vec<_>>());
        }
    }

    #[test]
    fn head_at_sizes_1_to_3() {
        for len in 1..4 {
            let ns = nodes(len);
            let list = filled(&ns, len);
            // SAFETY: not empty.
            assert_eq!(id(unsafe { list.head() }), 0);
            assert_eq!(order(&list).len(), len, "head leaves it linked");
        }
    }

    #[test]
    fn pop_front_at_sizes_1_to_3() {
        for len in 1..4 {
            let ns = nodes(len);
            let mut list = filled(&ns, len);
            for first in 0..len {
                // SAFETY: not empty: `len - first` nodes remain.
                let (head, now_empty) = unsafe { list.pop_front() };
                assert_eq!(id(head), first);
                assert_eq!(now_empty, first + 1 == len);
                assert_eq!(list.is_empty(), now_empty);
                assert_eq!(order(&list), (first + 1..len).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn unlink_the_only_node() {
        let ns = nodes(1);
        let mut list = filled(&ns, 1);
        // SAFETY: node 0 is linked here.
        assert!(unsafe { list.unlink(&ns[0]) });
        assert!(list.is_empty());
        // And the emptied list takes it back.
        // SAFETY: unlinked again, pinned, outlives the list.
        unsafe { list.push_back(ns[0].as_ref()) };
        assert_eq!(order(&list), [0]);
    }

    #[test]
    fn unlink_head_tail_and_middle_at_sizes_2_and_3() {
        let cases: [(usize, usize, &[usize]); 5] = [
            (2, 0, &[1]),
            (2, 1, &[0]),
            (3, 0, &[1, 2]),
            (3, 1, &[0, 2]),
            (3, 2, &[0, 1]),
        ];
        for (len, gone, left) in cases {
            let ns = nodes(len);
            let mut list = filled(&ns, len);
            // SAFETY: node `gone` is linked here.
            assert!(!unsafe { list.unlink(&ns[gone]) }, "{len} {gone}");
            assert_eq!(order(&list), left, "{len} {gone}");
            // A tail unlinked leaves its prev as the tail: push lands after it.
            // SAFETY: unlinked again, pinned, outlives the list.
            unsafe { list.push_back(ns[gone].as_ref()) };
            let mut want = left.to_vec();
            want.push(gone);
            assert_eq!(order(&list), want, "{len} {gone} pushed back");
        }
    }

    #[test]
    fn rotate_at_sizes_1_to_3() {
        for len in 1..4 {
            let ns = nodes(len);
            let mut list = filled(&ns, len);
            let mut model: VecDeque<usize> = (0..len).collect();
            for _ in 0..len {
                // SAFETY: not empty.
                let moved = unsafe { list.rotate() };
                assert_eq!(Some(id(moved)), model.front().copied());
                model.rotate_left(1);
                assert_eq!(order(&list), Vec::from(model.clone()));
            }
            assert_eq!(order(&list), (0..len).collect::<Vec<_>>(), "n turns of n");
        }
    }

    /// Nodes a random run may link at once.
    const POOL: usize = 8;

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Push(usize),
        Pop,
        Unlink(usize),
        Rotate,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..POOL).prop_map(Op::Push),
            1 => Just(Op::Pop),
            2 => (0..POOL).prop_map(Op::Unlink),
            1 => Just(Op::Rotate),
        ]
    }

    /// One step on the list and on the model; `Err` when they disagree.
    fn step(
        list: &mut List<Node>,
        model: &mut VecDeque<usize>,
        ns: &[Pin<Box<Node>>],
        op: Op,
    ) -> Result<(), TestCaseError> {
        match op {
            Op::Push(i) => {
                let free: Vec<usize> = (0..POOL).filter(|n| !model.contains(n)).collect();
                if let Some(&n) = free.get(i % free.len().max(1)) {
                    // SAFETY: not in the model, so unlinked; pinned, outlives the list.
                    unsafe { list.push_back(ns[n].as_ref()) };
                    model.push_back(n);
                }
            }
            Op::Pop if !model.is_empty() => {
                // SAFETY: not empty, as the model says.
                let (head, now_empty) = unsafe { list.pop_front() };
                prop_assert_eq!(Some(id(head)), model.pop_front());
                prop_assert_eq!(now_empty, model.is_empty());
            }
            Op::Unlink(i) if !model.is_empty() => {
                let n = model.remove(i % model.len()).unwrap();
                // SAFETY: in the model, so linked here.
                let now_empty = unsafe { list.unlink(&ns[n]) };
                prop_assert_eq!(now_empty, model.is_empty());
            }
            Op::Rotate if !model.is_empty() => {
                // SAFETY: not empty, as the model says.
                let moved = unsafe { list.rotate() };
                prop_assert_eq!(Some(id(moved)), model.front().copied());
                model.rotate_left(1);
            }
            _ => prop_assert!(list.is_empty()),
        }
        prop_assert_eq!(order(list), Vec::from(model.clone()));
        Ok(())
    }

    // Miri checks the pointer work for aliasing and use after free, with
    // a few random runs (all 8 tests, about 45 s on two cores):
    // MIRIFLAGS=-Zmiri-disable-isolation cargo +nightly miri test -p holdline --lib line_list
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 2000 }))]

        /// Against a `VecDeque`: after every push, pop, unlink and
        /// rotate, the list's order (forwards and backwards) is the model's.
        #[test]
        fn matches_a_deque(ops in proptest::collection::vec(op(), 1..200)) {
            let ns = nodes(POOL);
            let mut list = List::new();
            let mut model = VecDeque::new();
            for op in ops {
                step(&mut list, &mut model, &ns, op)?;
            }
        }
    }
}
