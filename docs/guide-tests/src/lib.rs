//! The guide's Rust examples, run as doctests by `cargo test --release`
//! (or alone: `cargo test --release -p holdline-guide-tests`).
//!
//! Each chapter of `docs/src/` is the doc of one item below, so every
//! ```` ```rust ```` block in it compiles and runs; a block marked
//! `no_run` (it needs a running `holdline serve`) still compiles.

/// `docs/src/library.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/library.md")]
pub struct Library;

/// `docs/src/tasks.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/tasks.md")]
pub struct Tasks;

/// `docs/src/permits.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/permits.md")]
pub struct Permits;

/// `docs/src/elections.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/elections.md")]
pub struct Elections;

/// `docs/src/server.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/server.md")]
pub struct Server;

/// `docs/src/operating.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/operating.md")]
pub struct Operating;

/// `docs/src/cluster.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/cluster.md")]
pub struct Cluster;

/// `docs/src/numbers.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/numbers.md")]
pub struct Numbers;

/// `docs/src/design.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/design.md")]
pub struct Design;

/// `docs/src/start.md`
#[cfg(doctest)]
#[doc = include_str!("../../src/start.md")]
pub struct Start;
