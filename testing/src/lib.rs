//! `holdline-testing`: what the workspace's tests share. It is never
//! published (`publish = false`): the crates depend on it as a
//! dev-dependency, and the harness as a normal one for the process
//! starters it runs.
//!
//! Modules, bottom-up:
//! - `spawn`: the processes tests start (`holdline serve` on a port it
//!   binds itself, a private etcd member), with the checks for missing
//!   tools;
//! - `cluster`: the one cluster starter: a private etcd and nodes of
//!   `holdline serve --etcd`, their `CLUSTER SLOTS`, and the wait until
//!   the map settles (the server's and the Rust client's tests, the
//!   harness);
//! - `certs` (feature `certs`): a CA and leaves made at test time (rcgen)
//!   for the TLS tests of the server and the Rust client;
//! - `module_graph`: the source rules every crate checks on its own
//!   sources (no import cycle, no long function, a crate doc's module map
//!   that names every module), with [`module_graph_tests!`] writing a
//!   crate's tests of them.

#[cfg(feature = "certs")]
pub mod certs;
pub mod cluster;
pub mod module_graph;
pub mod spawn;
