//! Placeholder replaced by the classifier throughput benchmark.
fn main() {}
