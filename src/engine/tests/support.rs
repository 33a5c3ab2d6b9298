//! Shared by the engine's GPU tests: whether a GPU test runs here, and test data.

use corank::engine::gpu;

/// Whether `test` can run: a usable GPU. Without one the test skips (a line on stderr),
/// unless `CORANK_REQUIRE_GPU=1`, which makes that a failure (the GPU machine sets it).
pub fn gpu_or_skip(test: &str) -> bool {
    match gpu::availability() {
        Ok(()) => true,
        Err(e) => {
            if std::env::var("CORANK_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("{test}: CORANK_REQUIRE_GPU=1 but no GPU: {e}");
            }
            eprintln!("{test}: skipped, no GPU: {e}");
            false
        }
    }
}

/// `CORANK_GPU_SMALL=1`: only the small cases (compute-sanitizer runs).
pub fn small_only() -> bool {
    std::env::var("CORANK_GPU_SMALL").as_deref() == Ok("1")
}

/// xorshift64*: deterministic test data without extra dependencies.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
