//! The engine options every entry point shares: which engine, which GPU kernel, which
//! device, from what size the GPU pays, and what happens when the GPU is missing or fails.
//!
//! One struct, [`EngineOptions`], is embedded in [`crate::MergeOptions`] (the batch API),
//! [`crate::frontier::FrontierOptions`] (the streaming merge), the DataFusion settings
//! (`corank.engine`, `corank.kernel`, `corank.devices`, `corank.gpu_min_rows`) and the
//! command line (`--engine`, `--kernel`, `--devices`, `--gpu-min-rows`), with one default each.
//! The library reads no environment variable: the command line and the tests do.

use crate::error::{Error, Result};

/// Below this many rows `Engine::Auto` stays on the CPU: the transfer and launch overheads
/// are not repaid there (the measurements: docs/performance.md).
pub const GPU_MIN_ROWS: usize = 1 << 20;

/// Which engine merges the keys. [`EngineOptions`] has an example.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Engine {
    /// The GPU where one is usable and the input is large enough, else the CPU.
    #[default]
    Auto,
    /// The merge path on rayon threads.
    Cpu,
    /// The co-rank kernels on the GPU; an error where no GPU is usable.
    Gpu,
}

/// Which GPU kernel merges (the CPU engine ignores it). [`EngineOptions`] has an example.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Kernel {
    /// The kernel the GPU policy picks for the run count and key width, the fastest where
    /// it was measured (docs/gpu.md, docs/performance.md).
    #[default]
    Auto,
    /// Tree of pairwise merges; per-thread co-rank and serial merge on global memory.
    Basic,
    /// Tree of pairwise merges; one co-rank pair per block, tile in shared memory.
    Tiled,
    /// Tree of pairwise merges; circular buffers that reload only what was consumed.
    Circular,
    /// Single pass for up to 64 runs: k-way co-rank per tile, merge in shared memory.
    KWay,
}

/// What `Engine::Auto` does when no GPU is usable or the GPU fails mid-merge.
/// [`EngineOptions`] has an example.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnGpuFailure {
    /// Merge on the CPU instead, with one log line: no data is lost.
    #[default]
    UseCpu,
    /// Return the error, and send every `Auto` merge to the GPU whatever its size (the
    /// GPU tests: `CORANK_REQUIRE_GPU=1` on the command line and in the test suite).
    Error,
}

/// The engine choice and its knobs.
///
/// ```
/// use corank::{merge_keys, Engine, EngineOptions, KeyColumn};
///
/// // The CPU engine whatever the size; `Engine::Auto` (the default) would try the GPU from
/// // `gpu_min_rows` rows on.
/// let options = EngineOptions::default().with_engine(Engine::Cpu);
/// assert_eq!(options.to_string(), "cpu");
/// let (indices, engine) = merge_keys(&KeyColumn::U32(vec![1, 4, 2, 3]), &[0, 2, 4], &options).unwrap();
/// assert_eq!((indices.to_vec(), engine), (vec![0, 2, 3, 1], Engine::Cpu));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EngineOptions {
    /// Which engine merges ([`Engine::Auto`] by default).
    pub engine: Engine,
    /// Which GPU kernel merges ([`Kernel::Auto`] by default; the CPU engine ignores it).
    pub kernel: Kernel,
    /// The CUDA devices the GPU engine uses (device 0 unless set).
    pub devices: Devices,
    /// `Engine::Auto` uses the GPU for merges (or streaming rounds) of at least this many rows.
    pub gpu_min_rows: usize,
    /// What happens when no GPU is usable or the GPU fails ([`OnGpuFailure::UseCpu`] by
    /// default: the CPU merges instead).
    pub on_gpu_failure: OnGpuFailure,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            engine: Engine::Auto,
            kernel: Kernel::Auto,
            devices: Devices::One(0),
            gpu_min_rows: GPU_MIN_ROWS,
            on_gpu_failure: OnGpuFailure::UseCpu,
        }
    }
}

impl EngineOptions {
    /// Sets [`engine`](Self::engine).
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }
    /// Sets [`kernel`](Self::kernel).
    pub fn with_kernel(mut self, kernel: Kernel) -> Self {
        self.kernel = kernel;
        self
    }
    /// Uses the one CUDA device `device`.
    pub fn with_device(mut self, device: usize) -> Self {
        self.devices = Devices::One(device);
        self
    }
    /// Sets [`devices`](Self::devices).
    pub fn with_devices(mut self, devices: Devices) -> Self {
        self.devices = devices;
        self
    }
    /// Sets [`gpu_min_rows`](Self::gpu_min_rows), in rows.
    pub fn with_gpu_min_rows(mut self, rows: usize) -> Self {
        self.gpu_min_rows = rows;
        self
    }
    /// Sets [`on_gpu_failure`](Self::on_gpu_failure).
    pub fn with_on_gpu_failure(mut self, on_failure: OnGpuFailure) -> Self {
        self.on_gpu_failure = on_failure;
        self
    }
}

/// Names as the settings and flags spell them.
macro_rules! named {
    ($ty:ident, $what:literal, $($variant:ident = $name:literal),+) => {
        impl $ty {
            /// Every value, in the order the help lists them.
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];
            /// The value's name as the settings and flags spell it (lower case; what
            /// `Display` prints and `FromStr` takes, in any case).
            pub fn name(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
        impl std::str::FromStr for $ty {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                let s = s.to_ascii_lowercase();
                $(if s == $name { return Ok($ty::$variant); })+
                Err(Error::InvalidArgument(format!(concat!("unknown ", $what, " '{}' ({})"), s, [$($name),+].join(", "))))
            }
        }
    };
}

named!(Engine, "engine", Auto = "auto", Cpu = "cpu", Gpu = "gpu");
named!(Kernel, "kernel", Auto = "auto", Basic = "basic", Tiled = "tiled", Circular = "circular", KWay = "kway");

/// The engine's name, then the kernel and device where they are not the defaults
/// (`gpu`, `gpu kernel=kway devices=0,1`), as EXPLAIN shows it.
impl std::fmt::Display for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.engine)?;
        if self.kernel != Kernel::Auto {
            write!(f, " kernel={}", self.kernel)?;
        }
        if self.devices != Devices::One(0) {
            write!(f, " devices={}", self.devices)?;
        }
        Ok(())
    }
}

/// The CUDA devices the GPU engine merges on: one (the default, device 0), a set, or every
/// device present. With more than one, the output is cut into one contiguous range per
/// device by co-rank and each device merges only its inputs' slices (`engine::gpu`).
///
/// Spelled as the settings and flags take it: `0`, `0,1`, `all`.
///
/// ```
/// use corank::{Devices, EngineOptions};
///
/// let devices: Devices = "0,2".parse()?;
/// assert_eq!(devices.ordinals(4), [0, 2]);
/// let options = EngineOptions::default().with_devices(devices);
/// assert_eq!(options.to_string(), "auto devices=0,2");
/// # Ok::<(), corank::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Devices {
    /// One device ordinal.
    One(usize),
    /// Several devices: bit `d` set for ordinal `d` (ordinals below 64), at least two bits.
    Set(u64),
    /// Every device present (at least one).
    All,
}

impl Default for Devices {
    fn default() -> Self {
        Devices::One(0)
    }
}

impl Devices {
    /// The most ordinals a set holds.
    pub const MAX_ORDINALS: usize = 64;

    /// The devices of `ordinals` (duplicates ignored): `One` for one ordinal, else `Set`.
    /// An empty list, or an ordinal of 64 or more in a list of several, is an error.
    pub fn from_ordinals(ordinals: &[usize]) -> Result<Devices> {
        let mut mask = 0u64;
        for &d in ordinals {
            if d >= Self::MAX_ORDINALS {
                if ordinals.iter().all(|&o| o == d) {
                    return Ok(Devices::One(d));
                }
                return Err(Error::InvalidArgument(format!(
                    "device ordinal {d} in a list: lists take ordinals below {}",
                    Self::MAX_ORDINALS
                )));
            }
            mask |= 1 << d;
        }
        match mask.count_ones() {
            0 => Err(Error::InvalidArgument("no device given (an ordinal such as 0, a list such as 0,1, or all)".into())),
            1 => Ok(Devices::One(mask.trailing_zeros() as usize)),
            _ => Ok(Devices::Set(mask)),
        }
    }

    /// The ordinals, in increasing order, given the number of devices present (`All` is
    /// every one of them; the others are returned as they are, whether present or not).
    pub fn ordinals(self, present: usize) -> Vec<usize> {
        match self {
            Devices::One(d) => vec![d],
            Devices::Set(mask) => (0..Self::MAX_ORDINALS).filter(|d| mask >> d & 1 == 1).collect(),
            Devices::All => (0..present).collect(),
        }
    }

    /// The first device: the one that serves single-device work (the payload gather, the
    /// device name in reports).
    pub fn first(self) -> usize {
        match self {
            Devices::One(d) => d,
            Devices::Set(mask) => mask.trailing_zeros() as usize,
            Devices::All => 0,
        }
    }
}

impl std::fmt::Display for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Devices::All => f.write_str("all"),
            d => {
                let list: Vec<String> = d.ordinals(0).iter().map(|o| o.to_string()).collect();
                f.write_str(&list.join(","))
            }
        }
    }
}

impl std::str::FromStr for Devices {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("all") {
            return Ok(Devices::All);
        }
        let ordinals = s
            .split(',')
            .map(|part| {
                part.trim().parse::<usize>().map_err(|_| {
                    Error::InvalidArgument(format!("invalid devices '{s}': a device ordinal (0), a list of them (0,1) or all"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Devices::from_ordinals(&ordinals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print() {
        for (text, devices, shown) in [
            ("0", Devices::One(0), "0"),
            ("3", Devices::One(3), "3"),
            ("0,1", Devices::Set(0b11), "0,1"),
            (" 2, 0 ,2", Devices::Set(0b101), "0,2"),
            ("1,1", Devices::One(1), "1"),
            ("ALL", Devices::All, "all"),
            ("100", Devices::One(100), "100"),
        ] {
            let parsed: Devices = text.parse().unwrap();
            assert_eq!(parsed, devices, "{text}");
            assert_eq!(parsed.to_string(), shown);
            assert_eq!(shown.parse::<Devices>().unwrap(), devices);
        }
        for bad in ["", "x", "0,", "-1", "0,64", "1;2", "0, all"] {
            assert!(bad.parse::<Devices>().is_err(), "{bad}");
        }
    }

    #[test]
    fn devices_ordinals_and_first() {
        assert_eq!(Devices::One(2).ordinals(1), vec![2]);
        assert_eq!(Devices::Set(0b1010).ordinals(1), vec![1, 3]);
        assert_eq!(Devices::All.ordinals(3), vec![0, 1, 2]);
        assert_eq!(Devices::All.ordinals(0), Vec::<usize>::new());
        assert_eq!((Devices::One(2).first(), Devices::Set(0b1010).first(), Devices::All.first()), (2, 1, 0));
        assert_eq!(EngineOptions::default().with_device(1).devices, Devices::One(1));
        assert_eq!(EngineOptions::default().with_devices(Devices::All).to_string(), "auto devices=all");
    }
}
