//! The command line's logger: the `log` records of corank (and of its libraries) on stderr,
//! filtered as `RUST_LOG` says, in env_logger's syntax without its regular expressions:
//! `info`, `corank=debug`, `warn,corank::engine=trace,datafusion=off`. Without `RUST_LOG`:
//! warnings and errors; `-v` raises corank's own records to info (the line saying that no
//! GPU is usable and the merge runs on the CPU, the run plan), `-vv` to debug, `-vvv` to
//! trace, also over a `RUST_LOG` that names a lower level for them.
//!
//! A line: `[2026-11-22T07:01:02.345Z INFO  corank::engine] corank: no usable GPU (...); merging on the CPU`.

use log::{LevelFilter, Log, Metadata, Record};
use std::io::Write;

/// The levels by module: the longest module path that names a record's target (or a
/// prefix of it at `::`) decides; `None` is the default for every other target. Without a
/// default a target no directive names is not logged (as env_logger does).
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    directives: Vec<(Option<String>, LevelFilter)>,
}

fn parse_level(s: &str) -> Option<LevelFilter> {
    match s.trim().to_ascii_lowercase().as_str() {
        "off" => Some(LevelFilter::Off),
        "error" => Some(LevelFilter::Error),
        "warn" | "warning" => Some(LevelFilter::Warn),
        "info" => Some(LevelFilter::Info),
        "debug" => Some(LevelFilter::Debug),
        "trace" => Some(LevelFilter::Trace),
        _ => None,
    }
}

impl Filter {
    /// `RUST_LOG`'s text; the directives that cannot be read are returned to be reported.
    /// Later directives for the same module replace earlier ones.
    pub fn parse(spec: &str) -> (Filter, Vec<String>) {
        let mut filter = Filter { directives: Vec::new() };
        let mut bad = Vec::new();
        // `/regex` (env_logger's message filter) is not supported: reported, then ignored.
        let (spec, regex) = spec.split_once('/').map_or((spec, None), |(s, r)| (s, Some(r)));
        if let Some(r) = regex {
            bad.push(format!("/{r}"));
        }
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let directive = match part.split_once('=') {
                Some((module, level)) => match parse_level(level) {
                    Some(l) if !module.trim().is_empty() => Some((Some(module.trim().to_string()), l)),
                    _ => None,
                },
                // A level alone is the default; a module alone logs everything of it.
                None => Some(parse_level(part).map_or((Some(part.to_string()), LevelFilter::Trace), |l| (None, l))),
            };
            match directive {
                Some((module, level)) => filter.set(module, level),
                None => bad.push(part.to_string()),
            }
        }
        (filter, bad)
    }

    fn set(&mut self, module: Option<String>, level: LevelFilter) {
        self.directives.retain(|(m, _)| *m != module);
        self.directives.push((module, level));
    }

    /// The level for records of `target`.
    pub fn level_for(&self, target: &str) -> LevelFilter {
        let mut best: Option<(usize, LevelFilter)> = None;
        for (module, level) in &self.directives {
            let len = match module {
                None => 0,
                Some(m) if target == m || target.strip_prefix(m.as_str()).is_some_and(|rest| rest.starts_with("::")) => m.len() + 1,
                Some(_) => continue,
            };
            if best.is_none_or(|(l, _)| len > l) {
                best = Some((len, *level));
            }
        }
        best.map_or(LevelFilter::Off, |(_, l)| l)
    }

    /// Raises the level of `module` (and of its submodules that a directive set lower) to
    /// at least `level`.
    pub fn raise(&mut self, module: &str, level: LevelFilter) {
        for (m, l) in &mut self.directives {
            if m.as_deref().is_some_and(|m| m == module || m.starts_with(&format!("{module}::"))) && *l < level {
                *l = level;
            }
        }
        if self.level_for(module) < level {
            self.set(Some(module.to_string()), level);
        }
    }

    /// The most detailed level any directive lets through.
    pub fn max_level(&self) -> LevelFilter {
        self.directives.iter().map(|(_, l)| *l).max().unwrap_or(LevelFilter::Off)
    }
}

/// The filter of a run: `RUST_LOG` when it is set and not empty, else warnings; then
/// `verbose` (the count of `-v`) raises corank's records.
pub fn filter_for(rust_log: Option<&str>, verbose: u8) -> (Filter, Vec<String>) {
    let (mut filter, bad) = match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(spec) => Filter::parse(spec),
        None => Filter::parse("warn"),
    };
    // Nothing readable (every directive reported): the default, not silence.
    if filter.directives.is_empty() {
        filter = Filter::parse("warn").0;
    }
    let level = match verbose {
        0 => LevelFilter::Off,
        1 => LevelFilter::Info,
        2 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    };
    if level > LevelFilter::Off {
        filter.raise("corank", level);
    }
    (filter, bad)
}

struct StderrLogger {
    filter: Filter,
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= self.filter.level_for(metadata.target())
    }

    fn log(&self, record: &Record) {
        if self.enabled(record.metadata()) {
            // One write per line, so lines from several threads do not interleave; a
            // failing stderr is ignored (nowhere left to say it).
            let line = format!("[{} {:<5} {}] {}\n", utc_now(), record.level(), record.target(), record.args());
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Installs the logger (once; later calls change nothing). Directives of `RUST_LOG` that
/// cannot be read are reported on stderr, once each, and ignored.
pub fn init(verbose: u8) {
    let rust_log = std::env::var("RUST_LOG").ok();
    install(filter_for(rust_log.as_deref(), verbose));
}

/// Installs the logger with a filter from [`filter_for`] (once; later calls change nothing),
/// reporting the directives it could not read. `corank-ballista` (which shares this file)
/// passes its `--log-level-setting`.
pub fn install((filter, bad): (Filter, Vec<String>)) {
    for b in bad {
        tell!("corank: warning: RUST_LOG: ignoring '{b}' (use LEVEL or MODULE=LEVEL, comma-separated; levels off, error, warn, info, debug, trace)");
    }
    let max = filter.max_level();
    // Leaked: the logger lives as long as the process (`log` needs a `'static` one).
    if log::set_logger(Box::leak(Box::new(StderrLogger { filter }))).is_ok() {
        log::set_max_level(max);
    }
}

/// The time now in UTC, RFC 3339 with milliseconds: `2026-11-22T07:01:02.345Z`.
fn utc_now() -> String {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    utc(since.as_secs(), since.subsec_millis())
}

fn utc(secs: u64, millis: u32) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rest / 3600, rest / 60 % 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_directives() {
        let (f, bad) = Filter::parse("warn,corank=debug,corank::engine=trace,datafusion=off");
        assert!(bad.is_empty());
        assert_eq!(f.level_for("corank"), LevelFilter::Debug);
        assert_eq!(f.level_for("corank::parquet::inputs"), LevelFilter::Debug);
        assert_eq!(f.level_for("corank::engine"), LevelFilter::Trace);
        assert_eq!(f.level_for("corank::engine::gpu"), LevelFilter::Trace);
        assert_eq!(f.level_for("corankx"), LevelFilter::Warn, "a prefix counts only at ::");
        assert_eq!(f.level_for("datafusion::physical_plan"), LevelFilter::Off);
        assert_eq!(f.level_for("parquet"), LevelFilter::Warn);
        assert_eq!(f.max_level(), LevelFilter::Trace);
        // Only modules: the others are not logged; a module alone is everything of it.
        let (f, _) = Filter::parse("corank");
        assert_eq!(f.level_for("corank::engine"), LevelFilter::Trace);
        assert_eq!(f.level_for("tokio"), LevelFilter::Off);
        // Levels in any case; the last directive for a module wins; bad ones reported.
        let (f, bad) = Filter::parse(" INFO , corank=loud, =debug, corank=error, corank=Warn/abc");
        assert_eq!(bad, vec!["/abc".to_string(), "corank=loud".into(), "=debug".into()]);
        assert_eq!(f.level_for("x"), LevelFilter::Info);
        assert_eq!(f.level_for("corank"), LevelFilter::Warn);
    }

    #[test]
    fn verbose_raises_corank_over_rust_log() {
        let (f, _) = filter_for(None, 0);
        assert_eq!(f.level_for("corank::engine"), LevelFilter::Warn);
        let (f, _) = filter_for(Some(""), 1);
        assert_eq!(f.level_for("corank::engine"), LevelFilter::Info);
        assert_eq!(f.level_for("datafusion"), LevelFilter::Warn);
        let (f, _) = filter_for(Some("error,corank::engine=off"), 2);
        assert_eq!(f.level_for("corank::engine"), LevelFilter::Debug);
        assert_eq!(f.level_for("corank"), LevelFilter::Debug);
        assert_eq!(f.level_for("tokio"), LevelFilter::Error);
        let (f, _) = filter_for(Some("corank=trace"), 1);
        assert_eq!(f.level_for("corank"), LevelFilter::Trace, "-v never lowers");
        assert_eq!(filter_for(None, 3).0.level_for("corank"), LevelFilter::Trace);
        let (f, bad) = filter_for(Some("corank=loud"), 0);
        assert_eq!((f.level_for("corank"), bad.len()), (LevelFilter::Warn, 1), "an unreadable spec leaves the default");
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400 + 86_399, 7), "2000-02-29T23:59:59.007Z");
        assert_eq!(utc(1_795_330_862, 345), "2026-11-22T07:01:02.345Z");
    }
}
