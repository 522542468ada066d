//! The Rust client of `holdline serve`.
