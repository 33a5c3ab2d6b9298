//! The comparison's table (Markdown) and its line on corank's peak RSS.

use super::args::BenchArgs;
use super::contenders::{Contender, FLOOR};
use super::measure::Measurement;
use super::units::{group_digits, parse_bytes};
use std::fmt::Write as _;

/// A peak RSS in MiB, or `n/a`.
pub fn show_rss(rss: Option<u64>) -> String {
    rss.map_or_else(|| "n/a".into(), |b| format!("{:.0}", b as f64 / (1 << 20) as f64))
}

/// The table: per dataset and size, every contender, then a line that explains the ratios.
/// `corank best / this`: the best corank engine's speed over this contender's (its seconds
/// over corank's; above 1, corank is faster). `this / floor`: this contender's seconds over
/// the floor's (1.00 = only the decoding and re-encoding; lower is faster, below 1 where
/// passthrough skips that work).
pub fn render(results: &[Measurement], contenders: &[Contender]) -> String {
    let mut out = String::new();
    out.push_str("| dataset | rows | contender | version | seconds | M rows/s | peak RSS MiB | corank best / this | this / floor |\n");
    out.push_str("|---|---:|---|---|---:|---:|---:|---:|---:|\n");
    let mut groups: Vec<(&str, usize)> = results.iter().map(|m| (m.dataset.as_str(), m.rows)).collect();
    groups.dedup();
    for (dataset, rows) in groups {
        let at: Vec<&Measurement> = results.iter().filter(|m| m.dataset == dataset && m.rows == rows).collect();
        let best = at.iter().filter(|m| m.contender.starts_with("corank")).map(|m| m.seconds).fold(f64::INFINITY, f64::min);
        let floor = at.iter().find(|m| m.contender == FLOOR).map(|m| m.seconds);
        for m in at {
            let version = contenders.iter().find(|(n, _)| *n == m.contender).map(|(_, v)| v.as_str()).unwrap_or("");
            let ratio = |x: f64| if x.is_finite() { format!("{x:.2}x") } else { "n/a".into() };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} |",
                dataset,
                group_digits(rows),
                m.contender,
                version,
                m.seconds,
                rows as f64 / m.seconds / 1e6,
                show_rss(m.peak_rss),
                ratio(m.seconds / best),
                ratio(floor.map_or(f64::NAN, |f| m.seconds / f)),
            );
        }
    }
    out.push_str(
        "(corank best / this: how many times faster the best corank engine is than this contender; \
         this / floor: this contender's time over the floor's, decoding and re-encoding the rows with no merge; lower is faster)\n",
    );
    out
}

/// corank's memory limit in the run: `--memory-limit` as given, or the default's size.
pub fn memory_limit_shown(args: &BenchArgs) -> String {
    match &args.memory_limit {
        Some(limit) => limit.clone(),
        None => format!("{:.1} GiB (default)", corank::parquet::default_memory_limit() as f64 / (1u64 << 30) as f64),
    }
}

/// Whether every corank run's peak RSS stayed within its memory limit (`--memory-limit`, or
/// corank's default) + 20%, as a line naming the runs over it; None where no corank run's
/// RSS is known or the limit is not a size.
pub fn memory_bound(results: &[Measurement], args: &BenchArgs) -> Option<String> {
    let limit = match &args.memory_limit {
        Some(limit) => parse_bytes(limit).ok()?,
        None => corank::parquet::default_memory_limit(),
    };
    let memory_limit = memory_limit_shown(args);
    let bound = limit as f64 * 1.2;
    let corank = || results.iter().filter(|m| m.contender.starts_with("corank"));
    if !corank().any(|m| m.peak_rss.is_some()) {
        return None;
    }
    let over: Vec<String> = corank()
        .filter(|m| m.peak_rss.is_some_and(|r| r as f64 > bound))
        .map(|m| format!("{} {} {} rows", m.dataset, m.contender, group_digits(m.rows)))
        .collect();
    Some(match over.is_empty() {
        true => format!("corank's peak RSS is within --memory-limit {memory_limit} + 20% in every run"),
        false => format!("corank's peak RSS is over --memory-limit {memory_limit} + 20% in: {}", over.join(", ")),
    })
}
