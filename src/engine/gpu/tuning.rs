//! Every tuning constant of the GPU engine, in one place.
//!
//! Threads per block and items per thread (thread coarsening) per kernel and key width. A
//! tile is `THREADS * IPT` outputs; shared memory per block is a tile (or two) of keys plus
//! indices, so wider keys get fewer items per thread to stay within the per-block limit and
//! leave room for several blocks per multiprocessor.

/// Threads per block, every kernel.
pub const THREADS: u32 = 256;

/// Items per thread (and circular-buffer geometry) for one key width.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub ipt_basic: u32,
    pub ipt_tiled: u32,
    /// Items per thread of the circular kernel; its buffers hold `THREADS * ipt_circ` slots
    /// (a power of two) each for A and B.
    pub ipt_circ: u32,
    /// Tiles per block of the circular kernel (the section it streams through its buffers).
    pub circ_tiles: u32,
    pub ipt_kway: u32,
    /// The tiled kernel's `__launch_bounds__` minimum of resident blocks per multiprocessor
    /// (1: let the compiler choose the registers; more caps them, maybe with spills).
    pub tiled_min_blocks: u32,
}

/// The tuning for keys of `key_bytes` bytes: the measured defaults, then any overrides in
/// `CORANK_GPU_TUNING` (for tuning sweeps; see [`parse_overrides`]).
pub fn tuning(key_bytes: usize) -> Tuning {
    let mut t = match key_bytes {
        4 | 8 => Tuning {
            ipt_basic: 4,
            ipt_tiled: 16,
            ipt_circ: 4,
            circ_tiles: 8,
            ipt_kway: 4,
            tiled_min_blocks: 4,
        },
        _ => Tuning {
            ipt_basic: 4,
            ipt_tiled: 4,
            ipt_circ: 2,
            circ_tiles: 8,
            ipt_kway: 4,
            tiled_min_blocks: 1,
        },
    };
    static OVERRIDES: std::sync::OnceLock<Vec<(String, u32)>> = std::sync::OnceLock::new();
    let overrides = OVERRIDES.get_or_init(|| match std::env::var("CORANK_GPU_TUNING") {
        Ok(v) => parse_overrides(&v).unwrap_or_else(|e| {
            log::warn!("CORANK_GPU_TUNING ignored: {e}");
            Vec::new()
        }),
        Err(_) => Vec::new(),
    });
    for (name, v) in overrides {
        match name.as_str() {
            "ipt_basic" => t.ipt_basic = *v,
            "ipt_tiled" => t.ipt_tiled = *v,
            "ipt_circ" => t.ipt_circ = *v,
            "circ_tiles" => t.circ_tiles = *v,
            "ipt_kway" => t.ipt_kway = *v,
            "tiled_min_blocks" => t.tiled_min_blocks = *v,
            _ => unreachable!("parse_overrides accepts only the names above"),
        }
    }
    t
}

/// Parses `name=value,...` with names `ipt_basic`, `ipt_tiled`, `ipt_circ`, `circ_tiles`,
/// `ipt_kway`, `tiled_min_blocks` and values 1..=32 (applied to every key width, each process reads it once).
pub fn parse_overrides(s: &str) -> Result<Vec<(String, u32)>, String> {
    const NAMES: [&str; 6] = [
        "ipt_basic",
        "ipt_tiled",
        "ipt_circ",
        "circ_tiles",
        "ipt_kway",
        "tiled_min_blocks",
    ];
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| format!("`{item}` is not name=value"))?;
        let name = name.trim();
        if !NAMES.contains(&name) {
            return Err(format!(
                "unknown tuning `{name}` (known: {})",
                NAMES.join(", ")
            ));
        }
        let v: u32 = value
            .trim()
            .parse()
            .map_err(|_| format!("`{value}` is not a number"))?;
        if !(1..=32).contains(&v) {
            return Err(format!("{name}={v} is outside 1..=32"));
        }
        out.push((name.to_string(), v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::parse_overrides;

    #[test]
    fn overrides_parse_and_reject() {
        assert_eq!(
            parse_overrides("ipt_tiled=12, ipt_kway=6").unwrap(),
            vec![("ipt_tiled".into(), 12), ("ipt_kway".into(), 6)]
        );
        assert_eq!(parse_overrides("").unwrap(), vec![]);
        assert!(parse_overrides("ipt_tiled").is_err());
        assert!(parse_overrides("threads=3").is_err());
        assert!(parse_overrides("ipt_tiled=0").is_err());
        assert!(parse_overrides("ipt_tiled=x").is_err());
    }
}

/// The k-way partition runs in two passes: a coarse one every `KWAY_COARSE` tiles over
/// whole runs, then every tile boundary within the windows the coarse splits leave.
pub const KWAY_COARSE: u32 = 32;

/// Bytes of each pinned staging buffer (two of them, used alternately) for host transfers.
pub const STAGE_BYTES: usize = 64 << 20;

/// Chunks the last level is cut into so the download of one overlaps the merge of the next.
pub const DOWNLOAD_CHUNKS: usize = 8;
