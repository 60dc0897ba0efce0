//! Benchmark runner (being written).
fn main() {
    eprintln!("usage: cargo run --release -p lock-bench");
}
