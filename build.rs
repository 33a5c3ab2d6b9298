//! Records the optimization level corank itself is built at, for the benchmarks: a table
//! measured from a build below the `release` profile's level compares unoptimized CPU code
//! (parquet-rs, arrow, corank's own) with the device, so the benches say so beside it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let level = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=CORANK_BUILD_OPT_LEVEL={level}");
}
