//! `--compression` and `--spill-compression`: the codec as the command line names it, read
//! and shown.

use crate::{Error, Result, Setting};
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};

/// The codecs `--compression` names, for its error message.
const CODECS: &str = "none, snappy, lz4, zstd, zstd(1..22), gzip, gzip(0..9), brotli or brotli(0..11)";

/// `--compression`: `none` (or `uncompressed`), `snappy`, `lz4` (Parquet's LZ4_RAW;
/// `lz4_raw` too), `zstd` / `zstd(1..22)`, `gzip` / `gzip(0..9)`, `brotli` / `brotli(0..11)`,
/// in any case. Without a level, the parquet crate's default (zstd 1, gzip 6, brotli 1).
pub fn parse_output_compression(text: &str) -> Result<Compression> {
    let bad = |why: String| Error::InvalidSetting { setting: Setting::Compression, detail: format!("\"{text}\": {why} (use {CODECS})") };
    let lower = text.trim().to_ascii_lowercase();
    let (name, level) = match lower.split_once('(') {
        Some((name, rest)) => {
            let digits = rest.strip_suffix(')').ok_or_else(|| bad("no ')' after the level".into()))?.trim();
            let level: i64 = digits.parse().map_err(|_| bad(format!("'{digits}' is not a level")))?;
            (name.trim(), Some(level))
        }
        None => (lower.as_str(), None),
    };
    let range = |lo: i64, hi: i64| -> Result<Option<u32>> {
        match level {
            None => Ok(None),
            Some(l) if (lo..=hi).contains(&l) => Ok(Some(l as u32)),
            Some(l) => Err(bad(format!("{name} level {l} is not in {lo}..{hi}"))),
        }
    };
    let no_level = |c: Compression| match level {
        None => Ok(c),
        Some(_) => Err(bad(format!("{name} takes no level"))),
    };
    let internal = |e: parquet::errors::ParquetError| bad(e.to_string());
    match name {
        "none" | "uncompressed" => no_level(Compression::UNCOMPRESSED),
        "snappy" => no_level(Compression::SNAPPY),
        "lz4" | "lz4_raw" => no_level(Compression::LZ4_RAW),
        "zstd" => Ok(Compression::ZSTD(match range(1, 22)? {
            Some(l) => ZstdLevel::try_new(l as i32).map_err(internal)?,
            None => ZstdLevel::default(),
        })),
        "gzip" => Ok(Compression::GZIP(match range(0, 9)? {
            Some(l) => GzipLevel::try_new(l).map_err(internal)?,
            None => GzipLevel::default(),
        })),
        "brotli" => Ok(Compression::BROTLI(match range(0, 11)? {
            Some(l) => BrotliLevel::try_new(l).map_err(internal)?,
            None => BrotliLevel::default(),
        })),
        "" => Err(bad("no codec named".into())),
        other => Err(bad(format!("unknown codec '{other}'"))),
    }
}

pub use crate::parquet::show_compression;
