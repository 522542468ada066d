//! Nothing here: the benchmarks live in `benches/hold.rs`.
