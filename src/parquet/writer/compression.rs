//! The output's codec, by name: the codecs this build carries.

use crate::error::{Error, Result, Setting};
use parquet::basic::Compression;
use std::str::FromStr;

/// Parses `none`, `snappy`, `lz4` (LZ4_RAW), `zstd` / `zstd(1..22)`, `gzip` / `gzip(0..9)`,
/// `brotli` / `brotli(0..11)` (the codecs this build carries; the parquet crate's default level
/// where none is given).
///
/// ```
/// use corank::parquet::parse_compression;
/// use parquet::basic::Compression;
///
/// assert_eq!(parse_compression("snappy")?, Compression::SNAPPY);
/// assert!(parse_compression("zip").is_err()); // an `Error::InvalidSetting`
/// # Ok::<(), corank::Error>(())
/// ```
pub fn parse_compression(text: &str) -> Result<Compression> {
    let bad = |why: String| Error::InvalidSetting {
        setting: Setting::Compression,
        detail: format!("\"{text}\": {why} (use none, snappy, lz4, zstd or zstd(1..22), gzip or gzip(0..9), brotli or brotli(0..11))"),
    };
    let lower = text.trim().to_ascii_lowercase();
    let c = match lower.as_str() {
        "none" | "uncompressed" => Compression::UNCOMPRESSED,
        "zstd" => Compression::ZSTD(Default::default()),
        "gzip" => Compression::GZIP(Default::default()),
        "brotli" => Compression::BROTLI(Default::default()),
        // Parquet's LZ4_RAW: the Hadoop-framed LZ4 is deprecated for writing.
        "lz4" | "lz4_raw" => Compression::LZ4_RAW,
        other => Compression::from_str(other).map_err(|e| bad(e.to_string()))?,
    };
    match c {
        Compression::UNCOMPRESSED
        | Compression::SNAPPY
        | Compression::ZSTD(_)
        | Compression::GZIP(_)
        | Compression::BROTLI(_)
        | Compression::LZ4_RAW => Ok(c),
        other => Err(bad(format!("{other} is not built into corank"))),
    }
}

/// A codec as `--compression` names it: `zstd(3)`, `gzip(6)`, `lz4`, `none`; the inverse of
/// [`parse_compression`](crate::parquet::parse_compression).
pub fn show_compression(c: Compression) -> String {
    match c {
        Compression::UNCOMPRESSED => "none".into(),
        Compression::SNAPPY => "snappy".into(),
        Compression::LZ4_RAW => "lz4".into(),
        Compression::ZSTD(l) => format!("zstd({})", l.compression_level()),
        Compression::GZIP(l) => format!("gzip({})", l.compression_level()),
        Compression::BROTLI(l) => format!("brotli({})", l.compression_level()),
        other => other.to_string().to_ascii_lowercase(),
    }
}
