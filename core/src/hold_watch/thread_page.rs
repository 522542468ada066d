//! Each thread's page of the store it last held in with a maxHold,
//! and the giving back of its pages when the thread ends.
use super::{HoldWatch, Page};
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Weak};

std::thread_local! {
    /// (watch id, page): no destructor, so reading it is a plain load.
    static CACHED: Cell<(u64, *const Page)> = const { Cell::new((0, std::ptr::null())) };
    /// Every page this thread owns, given back when it ends.
    static OWNED: RefCell<Owned> = const { RefCell::new(Owned(Vec::new())) };
}

struct Owned(Vec<(Weak<HoldWatch>, *const Page)>);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = CACHED.try_with(|c| c.set((0, std::ptr::null())));
        for (watch, page) in self.0.drain(..) {
            if let Some(watch) = watch.upgrade() {
                watch.disown(page);
            }
        }
    }
}

/// This thread's name as a page's owner; `None` once its
/// thread-locals are gone (it is ending).
pub(super) fn identity() -> Option<usize> {
    CACHED.try_with(|c| c as *const _ as usize).ok()
}

/// This thread's page of `watch`, if it is the cached one.
#[inline(always)]
pub(super) fn cached(id: u64) -> Option<*const Page> {
    CACHED
        .try_with(|c| {
            let (cached_id, page) = c.get();
            (cached_id == id).then_some(page)
        })
        .ok()
        .flatten()
}

/// Remembers `page` as this thread's in `watch`; `false` when the
/// thread is ending (its thread-locals are gone).
pub(super) fn remember(watch: &Arc<HoldWatch>, page: *const Page, new: bool) -> bool {
    if new {
        let listed = OWNED.try_with(|o| match o.try_borrow_mut() {
            Ok(mut o) => {
                o.0.push((Arc::downgrade(watch), page));
                true
            }
            Err(_) => false,
        });
        if listed != Ok(true) {
            return false;
        }
    }
    CACHED.try_with(|c| c.set((watch.id, page))).is_ok()
}
