//! The GPU engine's set-up and devices: NVRTC compiles every kernel, availability and
//! tuning overrides never panic, the device choice, the merge split across devices and cut
//! into pieces within a memory limit. Kernel correctness by shape and width is in
//! `kernels.rs`, whose key makers these tests share.

use super::kernels::{runs, TestKey};
use super::support::{gpu_or_skip, small_only};
use corank::engine::cpu::merge_cpu;
use corank::engine::gpu::{self, GpuOptions};
use corank::keys::KeyColumn;
use corank::{Devices, Error, Indices, Kernel};

#[test]
fn compile_all_kernels_with_nvrtc() {
    match gpu::compile_all_kernels() {
        Err(Error::GpuUnavailable(why)) if std::env::var("CORANK_REQUIRE_NVRTC").as_deref() != Ok("1") => {
            eprintln!("compile_all_kernels_with_nvrtc: skipped: {why}")
        }
        other => other.unwrap(),
    }
}

#[test]
fn availability_never_panics() {
    let _ = gpu::availability();
    let _ = gpu::device_name(0);
    let _ = gpu::device_name(usize::MAX);
    // Registering host memory needs a device: without one it is an error, never a panic;
    // empty data registers nothing anywhere.
    match gpu::Registered::new(vec![1u32, 2, 3]) {
        Ok(r) => assert_eq!(r.into_inner(), [1, 2, 3]),
        Err(e) => assert!(matches!(e, Error::GpuUnavailable(_)) && gpu::device_name(0).is_err(), "{e}"),
    }
    assert!(gpu::Registered::new(Vec::<u64>::new()).is_ok());
}

/// Malformed tuning overrides are refused (valid ones would retune the other tests of this
/// process, so none are set here).
#[test]
fn bad_tuning_overrides_are_errors() {
    for bad in ["ipt_tiled", "ipt_tiled=0", "ipt_tiled=33", "threads=128", "ipt_kway=x"] {
        assert!(gpu::tuning::set_overrides(bad).is_err(), "{bad}");
    }
}

/// `GpuOptions::devices` picks the device: every device present merges like the CPU engine,
/// and an ordinal past the last device is `Error::GpuUnavailable` naming it (never a panic).
#[test]
fn device_choice() {
    if !gpu_or_skip("device_choice") {
        return;
    }
    let (keys, offsets) = runs::<u64>(&[3000, 5000, 1, 700], 1000, 42);
    let expect = merge_cpu(&keys, &offsets);
    let col = KeyColumn::U64(keys);
    let mut devices = 0;
    while let Ok(name) = gpu::device_name(devices) {
        assert!(!name.is_empty());
        for kernel in [Kernel::Auto, Kernel::KWay, Kernel::Circular] {
            let got =
                gpu::merge_gpu(&col, &offsets, &GpuOptions { kernel, devices: Devices::One(devices), ..GpuOptions::default() }).unwrap();
            assert!(got == expect, "device {devices}, {kernel:?}: differs from the CPU engine");
        }
        devices += 1;
    }
    assert!(devices >= 1);
    for device in [devices, devices + 7, usize::MAX] {
        match gpu::merge_gpu(&col, &offsets, &GpuOptions { devices: Devices::One(device), ..GpuOptions::default() }) {
            Err(Error::GpuUnavailable(m)) => assert!(m.contains(&device.to_string()), "{m}"),
            other => panic!("device {device} of {devices}: expected GpuUnavailable, got {other:?}"),
        }
        assert!(matches!(gpu::device_name(device), Err(Error::GpuUnavailable(_))));
    }
    // One run or none: still an error for a missing device.
    assert!(gpu::merge_gpu(&KeyColumn::U64(vec![1, 2]), &[0, 2], &GpuOptions { devices: Devices::One(devices), ..GpuOptions::default() })
        .is_err());
}

/// The merge split across devices (one output range per device by co-rank, each device
/// merging only its slices of the runs, its indices made global on the device): equal to the
/// CPU engine for every key width and index width, k from 2 to 64, empty runs, few and many
/// distinct keys (cuts inside runs of equal keys). The split runs over device 0 repeated
/// (so any GPU machine tests it), and over all devices where there are two or more.
#[test]
fn split_merge_matches_the_cpu() {
    if !gpu_or_skip("split_merge_matches_the_cpu") {
        return;
    }
    let count = (0..).take_while(|&d| gpu::device_name(d).is_ok()).count();
    let mut splits: Vec<Vec<usize>> = vec![vec![0, 0], vec![0, 0, 0]];
    if count >= 2 {
        splits.push((0..count).collect());
    } else {
        eprintln!("split_merge_matches_the_cpu: one GPU; the split runs over device 0 repeated only");
    }
    let cases: &[(usize, usize, u64)] = &[(2, 5000, u64::MAX), (3, 4000, 3), (16, 3000, 1000), (64, 700, 10), (64, 1, u64::MAX)];
    for &(k, per, range) in cases {
        let lens: Vec<usize> = (0..k).map(|r| if r % 7 == 3 { 0 } else { per + r * 13 }).collect();
        split_case::<u32>(&lens, range, &splits, count);
        split_case::<u64>(&lens, range, &splits, count);
        split_case::<[u64; 2]>(&lens, range, &splits, count);
        split_case::<[u64; 3]>(&lens, range, &splits, count);
        split_case::<[u64; 4]>(&lens, range, &splits, count);
    }
    if !small_only() {
        // Large enough for every download chunk to hold rows (the rebase runs per chunk).
        let lens = vec![1 << 18; 16];
        split_case::<u64>(&lens, u64::MAX, &splits, count);
        split_case::<u64>(&lens, 100, &splits, count);
    }
}

fn split_case<T: TestKey>(lens: &[usize], range: u64, splits: &[Vec<usize>], count: usize) {
    let (keys, offsets) = runs::<T>(lens, range, lens.len() as u64 * 31 + range);
    let expect = merge_cpu(&keys, &offsets).to_vec();
    let col = T::column(keys);
    for wide in [false, true] {
        let options = GpuOptions { force_u64_indices: wide, ..GpuOptions::default() };
        for devices in splits {
            let got = gpu::bench::merge_split_on(&col, &offsets, devices, &options).unwrap();
            assert!(matches!((&got, wide), (Indices::U64(_), true) | (Indices::U32(_), false)), "index width");
            assert!(
                got.to_vec() == expect,
                "{} runs, range {range}, {} key bytes, wide {wide}, devices {devices:?}",
                lens.len(),
                col.key_bytes()
            );
        }
        if count >= 2 {
            for devices in [Devices::All, Devices::Set(0b11)] {
                let got = gpu::merge_gpu(&col, &offsets, &GpuOptions { devices, ..options.clone() }).unwrap();
                assert!(got.to_vec() == expect, "merge_gpu on {devices}: differs from the CPU engine");
            }
        }
    }
}

/// A merge that needs more device memory than it may use (`device_memory_limit`, here its
/// keys' bytes and the 1 MiB a merge keeps for metadata) is cut into pieces that fit, merged one after another: identical to the
/// CPU engine for 2-way and k-way merges, every key width, both index widths and
/// duplicate-heavy keys (cuts inside runs of equal keys). Without the pieces the merge is
/// refused (`need > limit`), so a result at all shows they ran. A limit that no number of
/// pieces fits is `Error::Gpu`, never a wrong answer.
#[test]
fn merge_in_pieces_within_a_memory_limit() {
    if !gpu_or_skip("merge_in_pieces_within_a_memory_limit") {
        return;
    }
    let shapes: [&[usize]; 3] = [&[40_000, 30_000], &[5_000; 16], &[1, 20_000, 0, 9_000, 12_000]];
    let scale = if small_only() { 20 } else { 1 };
    for (i, lens) in shapes.iter().enumerate() {
        let lens: Vec<usize> = lens.iter().map(|l| l.div_ceil(scale)).collect();
        let lens = &lens[..];
        for range in [u64::MAX, 50] {
            pieces_case::<u64>(lens, range, i as u64);
            pieces_case::<u32>(lens, range, i as u64);
            pieces_case::<[u64; 2]>(lens, range, i as u64);
            pieces_case::<[u64; 4]>(lens, range, i as u64);
        }
    }
}

fn pieces_case<T: TestKey>(lens: &[usize], range: u64, seed: u64) {
    let (keys, offsets) = runs::<T>(lens, range, seed * 977 + range % 1000);
    let expect = merge_cpu(&keys, &offsets).to_vec();
    let col = T::column(keys);
    let limit = (1 << 20) + col.len() * col.key_bytes();
    for wide in [false, true] {
        let options = GpuOptions { force_u64_indices: wide, device_memory_limit: Some(limit), ..GpuOptions::default() };
        let got = gpu::merge_gpu(&col, &offsets, &options).unwrap();
        assert!(matches!((&got, wide), (Indices::U64(_), true) | (Indices::U32(_), false)), "index width");
        assert!(got.to_vec() == expect, "{lens:?}, range {range}, {} key bytes, wide {wide}: differs from the CPU engine", col.key_bytes());
    }
    let tiny = GpuOptions { device_memory_limit: Some(64), ..GpuOptions::default() };
    match gpu::merge_gpu(&col, &offsets, &tiny) {
        Err(Error::Gpu(m)) => assert!(m.contains("device memory"), "{m}"),
        other => panic!("a 64-byte limit: expected Error::Gpu, got {:?}", other.map(|i| i.len())),
    }
}

/// A device set naming a missing device is `Error::GpuUnavailable` naming it, before any
/// work, for the merge and the sort (never a panic, never a partial result).
#[test]
fn split_merge_with_a_missing_device() {
    if !gpu_or_skip("split_merge_with_a_missing_device") {
        return;
    }
    let (keys, offsets) = runs::<u64>(&[300, 500], 1000, 7);
    let col = KeyColumn::U64(keys);
    let missing = (0..).take_while(|&d| gpu::device_name(d).is_ok()).count();
    let devices = Devices::from_ordinals(&[0, missing]).unwrap();
    match gpu::merge_gpu(&col, &offsets, &GpuOptions { devices, ..GpuOptions::default() }) {
        Err(Error::GpuUnavailable(m)) => assert!(m.contains(&missing.to_string()), "{m}"),
        other => panic!("devices {devices}: expected GpuUnavailable, got {other:?}"),
    }
    // The sort split across the same devices: the same error, before any work.
    match gpu::sort_gpu(&col, &GpuOptions { devices, ..GpuOptions::default() }) {
        Err(Error::GpuUnavailable(m)) => assert!(m.contains(&missing.to_string()), "{m}"),
        other => panic!("sort on devices {devices}: expected GpuUnavailable, got {other:?}"),
    }
    assert!(gpu::bench::sort_split_on(&col, &[], &GpuOptions::default()).is_err());
    assert!(gpu::bench::merge_split_on(&col, &offsets, &[], &GpuOptions::default()).is_err());
    assert!(gpu::bench::merge_split_on(&col, &[0, 5], &[0, 0], &GpuOptions::default()).is_err());
}
