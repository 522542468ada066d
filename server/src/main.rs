//! `holdline serve`: one store behind a RESP socket.
fn main() {}
