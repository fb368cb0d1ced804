//! Placeholder replaced by the expansion benchmark.
fn main() {}
