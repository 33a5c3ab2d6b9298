//! Row counts and byte sizes as the command line reads them (`10M` rows, `2GiB`) and shows
//! them (`10,000,000`).
//!
//! Shared with the comparison harness (`benches/cli`), which includes this file with
//! `#[path]`: it names the library `corank::`, never `crate::`, and depends on nothing else.
// Each includer uses part of it.
#![allow(dead_code)]

/// `2GiB`, `512M`, `1.5g`, `100000` (bytes; K/M/G/T are powers of 1024).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.trim().parse().map_err(|_| format!("'{s}' is not a size (e.g. 512MiB, 2G, 100000)"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0f64.powi(4),
        _ => return Err(format!("'{s}': unknown unit '{unit}' (use B, KiB, MiB, GiB, TiB)")),
    };
    if value < 0.0 || !value.is_finite() {
        return Err(format!("'{s}' is not a size"));
    }
    Ok((value * scale) as usize)
}

/// `10M`, `250k`, `1000000` (rows; k/M/G are powers of 1000).
pub fn parse_count(s: &str) -> Result<usize, String> {
    let t = s.trim().replace('_', "");
    let (num, scale) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('m' | 'M') => (&t[..t.len() - 1], 1e6),
        Some('g' | 'G') => (&t[..t.len() - 1], 1e9),
        _ => (&t[..], 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a count (e.g. 250k, 10M)"))?;
    if v < 0.0 || !v.is_finite() {
        return Err(format!("'{s}' is not a count"));
    }
    Ok((v * scale).round() as usize)
}

/// `10,000,000`.
pub fn group_digits(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
