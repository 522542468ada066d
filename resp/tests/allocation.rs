//! A frame's header must not make the decoder allocate what it promises:
//! counted by a global allocator that records the largest request made on
//! the current thread.

use bytes::BytesMut;
use holdline_resp::{Decoder, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Largest;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to `System` unchanged; the thread-local
// is const-initialised, so recording a size never allocates.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn record(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

/// The largest single allocation `f` made on this thread.
fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.with(|l| l.set(0));
    f();
    LARGEST.with(|l| l.get())
}

#[test]
fn huge_headers_allocate_nothing_large() {
    for header in [
        &b"$999999999\r\n"[..],
        b"*999999999\r\n",
        b"~999999999\r\n",
        b"%999999999\r\n",
    ] {
        let size = largest_allocation(|| {
            let mut buf = BytesMut::from(header);
            assert!(Decoder::new(524_288)
                .decode(&mut buf)
                .unwrap_err()
                .is_too_large());
        });
        assert!(size < 4096, "{header:?} allocated {size} bytes");
    }
    // Within a huge limit, a count still reserves room only for elements
    // that arrive.
    let size = largest_allocation(|| {
        let mut buf = BytesMut::from(&b"*999999999\r\n:1\r\n"[..]);
        assert_eq!(Decoder::new(usize::MAX).decode(&mut buf), Ok(None));
    });
    assert!(size < 4096, "a count allocated {size} bytes");
    // The allocator does see large requests: a bulk body within the limit
    // is reserved at its header (that is what makes this test able to fail).
    let size = largest_allocation(|| {
        let mut buf = BytesMut::from(&b"$100000\r\n"[..]);
        assert_eq!(Decoder::new(1 << 20).decode(&mut buf), Ok(None));
    });
    assert!(size >= 100_000, "the body was not reserved ({size})");
    let _ = Value::Null;
}
