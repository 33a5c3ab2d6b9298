//! `1.5 GiB`: byte counts for people. One source, compiled into the library (its messages)
//! and into the CLI's tests (`#[path]`), so it stays out of the library's public API.

/// `1.5 GiB` (one decimal, binary units; `512 B` below a KiB).
pub fn show_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
