//! Merging keys that live in registered (page-locked) host memory on every GPU here: the
//! keys go up and the indices come down by DMA, with no staging copy (`Registered`,
//! `merge_gpu_into`). Registering costs about what pinning does, so a pipeline registers
//! its key buffer and its output once and merges into them again and again; this example
//! registers once, merges a few times and compares with the same merge from ordinary memory
//! and with the CPU engine. Without a GPU it says why and exits.
//!
//!   cargo run --release --example registered_merge [-- RUNS KEYS_PER_RUN]

use corank::gpu::{self, GpuOptions, Registered};
use corank::{merge_keys, Devices, Engine, EngineOptions, KeyColumn};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = args.first().map(|s| s.parse()).transpose()?.unwrap_or(16);
    let per_run: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(1 << 22);
    if let Err(why) = gpu::availability() {
        println!("no usable GPU here ({why}); nothing to show");
        return Ok(());
    }
    // Sorted runs of pseudo-random u64 keys, concatenated.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut keys = Vec::with_capacity(runs * per_run);
    for _ in 0..runs {
        let start = keys.len();
        keys.extend((0..per_run).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }));
        keys[start..].sort_unstable();
    }
    let offsets: Vec<usize> = (0..=runs).map(|r| r * per_run).collect();
    let n = keys.len();
    let cpu = EngineOptions { engine: Engine::Cpu, ..EngineOptions::default() };
    let expect = merge_keys(&KeyColumn::U64(keys.clone()), &offsets, &cpu)?.0.to_vec();

    let t = Instant::now();
    let registered = Registered::new(KeyColumn::U64(keys.clone()))?;
    let mut out = Registered::new(vec![0u32; n])?;
    println!("registered {} MiB of keys and indices in {:.2?} (once)", (n * 12) >> 20, t.elapsed());

    let plain = KeyColumn::U64(keys);
    let options = GpuOptions { devices: Devices::All, ..GpuOptions::default() };
    println!("{n} keys in {runs} runs on {}", gpu::devices_shown(Devices::All)?);
    for round in 0..3 {
        let t = Instant::now();
        let from_pageable = gpu::merge_gpu(&plain, &offsets, &options)?;
        let pageable = t.elapsed();
        let t = Instant::now();
        gpu::merge_gpu_into(&registered, &offsets, &options, out.as_mut_slice())?;
        let direct = t.elapsed();
        assert!(from_pageable.to_vec() == expect, "the GPU merge differs from the CPU engine's");
        assert!(out.iter().map(|&i| i as usize).eq(expect.iter().copied()), "the registered merge differs from the CPU engine's");
        println!("round {round}: from ordinary memory {pageable:.2?}, from registered memory {direct:.2?}");
    }
    Ok(())
}
