//! corank's settings as a DataFusion `ConfigExtension`, so SQL can say
//! `SET corank.enabled = false`, `SET corank.engine = 'cpu'`, `SET corank.window_rows = 65536`,
//! `SET corank.kernel = 'tiled'`, `SET corank.devices = '0,1'`, `SET corank.gpu_min_rows = 1048576`,
//! `SET corank.check_sorted = true`, `SET corank.sort = false`, `SET corank.sort_chunk_rows = 4194304`.
//!
//! Written out rather than with DataFusion's `extensions_options!` macro, whose entries carry
//! the bare field names (`engine`): `SHOW ALL` would list them without the `corank.` prefix
//! and `SHOW corank.engine` would not find them. Here every entry's key is the full name,
//! and `SET` checks the value when it is set (an unknown engine is an error then, not when
//! a query runs).
//!
//! The rule parses the settings once per plan into [`CoRankSettings`]; the nodes carry the
//! part they use ([`MergeSettings`]). The extension also holds the session's file-order
//! cache (not a setting: not listed, not compared), created by
//! [`with_corank_config`](super::with_corank_config) and [`register`](super::register);
//! without one, the rule reads every footer it needs each time, with the same result. And
//! it holds the session's `RuntimeEnv` (also not a setting), set by
//! [`SessionStateBuilderExt::with_corank`](super::SessionStateBuilderExt::with_corank) (and
//! so [`register`](super::register) and [`session_context`](super::session_context)): the
//! rule reads footers of files in object stores through its object store registry; without
//! it, only local files are proven sorted.

use super::file_order::{FileAccess, FileOrderCache};
use super::sort_chunk::DEFAULT_CHUNK_ROWS;
use crate::frontier::DEFAULT_WINDOW_ROWS;
use crate::options::{Devices, Engine, EngineOptions, Kernel, GPU_MIN_ROWS};
use datafusion::common::config::{ConfigEntry, ConfigExtension, ConfigField, ConfigOptions, ExtensionOptions};
use datafusion::common::{config_err, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use std::any::Any;
use std::sync::Arc;

/// corank settings (prefix `corank.`). The [`corank::datafusion`](super) example sets one
/// with SQL; [`with_corank_config`](super::with_corank_config) has an example that reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CoRankConfig {
    /// Replace plan-level SortPreservingMergeExec nodes with CoRankMergeExec.
    pub enabled: bool,
    /// Engine: 'auto' (GPU for large rounds where one is usable), 'cpu' or 'gpu'.
    pub engine: String,
    /// GPU kernel: 'auto', 'basic', 'tiled', 'circular' or 'kway'.
    pub kernel: String,
    /// CUDA devices of the GPU engine: an ordinal ('0'), a list ('0,1') or 'all'.
    pub devices: String,
    /// Rows buffered per input partition before each merge round.
    pub window_rows: usize,
    /// With engine 'auto', merge rounds of at least this many rows run on the GPU.
    pub gpu_min_rows: usize,
    /// Check every input partition's order while merging.
    pub check_sorted: bool,
    /// Replace SortExec (and the SortPreservingMergeExec above one) with CoRankSortExec.
    pub sort: bool,
    /// Rows per chunk that CoRankSortExec sorts at a time, each a run of its final merge.
    pub sort_chunk_rows: usize,
    /// The session's cache of the file-order proof (not a setting).
    file_order_cache: SessionHeld<FileOrderCache>,
    /// The session's runtime, whose object stores and file metadata cache the file-order
    /// proof reads footers through (not a setting).
    runtime: SessionHeld<RuntimeEnv>,
}

/// What a session holds in its config that is not a setting (its file-order cache, its
/// runtime), if anything: every two configs compare equal on it, and it is not among the
/// entries.
struct SessionHeld<T>(Option<Arc<T>>);

impl<T> Clone for SessionHeld<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Default for SessionHeld<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<T> PartialEq for SessionHeld<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for SessionHeld<T> {}

impl<T> std::fmt::Debug for SessionHeld<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let name = std::any::type_name::<T>().rsplit("::").next().unwrap_or("held");
        f.write_str(if self.0.is_some() { name } else { "None" })
    }
}

impl Default for CoRankConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            engine: Engine::Auto.to_string(),
            kernel: Kernel::Auto.to_string(),
            devices: Devices::default().to_string(),
            window_rows: DEFAULT_WINDOW_ROWS,
            gpu_min_rows: GPU_MIN_ROWS,
            check_sorted: false,
            sort: true,
            sort_chunk_rows: DEFAULT_CHUNK_ROWS,
            file_order_cache: SessionHeld::default(),
            runtime: SessionHeld::default(),
        }
    }
}

impl CoRankConfig {
    /// Gives the config a file-order cache of its own where it has none (its clones share
    /// it: a session's config and the configs copied from it).
    pub(crate) fn ensure_file_order_cache(&mut self) {
        if self.file_order_cache.0.is_none() {
            self.file_order_cache.0 = Some(Arc::new(FileOrderCache::default()));
        }
    }

    /// Makes `runtime` the session's: the file-order proof reads footers of files in
    /// object stores through its registry and file metadata cache.
    pub(crate) fn set_runtime(&mut self, runtime: Arc<RuntimeEnv>) {
        self.runtime.0 = Some(runtime);
    }

    /// What the file-order proof reads footers through: the session's file-order cache and
    /// runtime, those it holds.
    pub(crate) fn file_access(&self) -> FileAccess<'_> {
        FileAccess { cache: self.file_order_cache.0.as_deref(), runtime: self.runtime.0.as_deref() }
    }

    /// The settings' names (without the prefix) and descriptions, in `SHOW ALL` order.
    const ENTRIES: [(&'static str, &'static str); 9] = [
        ("check_sorted", "Check every input partition's order while merging: an unsorted input is an error naming the partition and row."),
        ("devices", "CUDA devices the GPU engine uses: an ordinal ('0'), a list ('0,1': each merge round and chunk sort is split across them) or 'all'."),
        ("enabled", "Replace plan-level SortPreservingMergeExec nodes with CoRankMergeExec, and check that the Parquet files below a merge are sorted as declared."),
        ("engine", "Merge engine: 'auto' (the GPU for rounds of at least gpu_min_rows where one is usable), 'cpu' or 'gpu'."),
        ("gpu_min_rows", "With engine 'auto', merge rounds of at least this many rows run on the GPU."),
        ("kernel", "GPU merge kernel: 'auto' (the fastest measured), 'basic', 'tiled', 'circular' or 'kway'."),
        ("sort", "Replace SortExec without a fetch (and the SortPreservingMergeExec above one) with CoRankSortExec: a stable sort of all partitions into one (needs corank.enabled)."),
        ("sort_chunk_rows", "Rows of an input partition that CoRankSortExec sorts at a time (fewer where a chunk's rows reach 256 MB), each chunk a run of the final merge: larger chunks make fewer runs, smaller ones start sorting sooner."),
        ("window_rows", "Rows buffered per input partition before each merge round; memory stays within about window_rows x partitions rows."),
    ];

    fn value(&self, name: &str) -> String {
        match name {
            "check_sorted" => self.check_sorted.to_string(),
            "enabled" => self.enabled.to_string(),
            "engine" => self.engine.clone(),
            "kernel" => self.kernel.clone(),
            "devices" => self.devices.clone(),
            "gpu_min_rows" => self.gpu_min_rows.to_string(),
            "sort" => self.sort.to_string(),
            "sort_chunk_rows" => self.sort_chunk_rows.to_string(),
            _ => self.window_rows.to_string(),
        }
    }
}

impl ExtensionOptions for CoRankConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    /// `key` without the prefix (what `ConfigOptions::set` passes) or with it.
    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let name = key.strip_prefix("corank.").unwrap_or(key);
        match name {
            "enabled" => ConfigField::set(&mut self.enabled, "", value),
            "check_sorted" => ConfigField::set(&mut self.check_sorted, "", value),
            "sort" => ConfigField::set(&mut self.sort, "", value),
            "gpu_min_rows" => ConfigField::set(&mut self.gpu_min_rows, "", value),
            "devices" => match value.parse::<Devices>() {
                Ok(devices) => {
                    self.devices = devices.to_string();
                    Ok(())
                }
                Err(_) => config_err!("invalid devices '{value}' for corank.devices (an ordinal such as 0, a list such as 0,1, or all)"),
            },
            "window_rows" | "sort_chunk_rows" => {
                let mut rows = 0usize;
                ConfigField::set(&mut rows, "", value)?;
                if rows == 0 {
                    return config_err!("corank.{name} must be at least 1");
                }
                if name == "window_rows" {
                    self.window_rows = rows;
                } else {
                    self.sort_chunk_rows = rows;
                }
                Ok(())
            }
            "engine" => match value.parse::<Engine>() {
                Ok(engine) => {
                    self.engine = engine.to_string();
                    Ok(())
                }
                Err(_) => config_err!("unknown engine '{value}' for corank.engine (auto, cpu or gpu)"),
            },
            "kernel" => match value.parse::<Kernel>() {
                Ok(kernel) => {
                    self.kernel = kernel.to_string();
                    Ok(())
                }
                Err(_) => config_err!("unknown kernel '{value}' for corank.kernel (auto, basic, tiled, circular or kway)"),
            },
            _ => config_err!(
                "unknown setting corank.{name} (corank.enabled, corank.engine, corank.kernel, corank.devices, corank.window_rows, corank.gpu_min_rows, corank.check_sorted, corank.sort, corank.sort_chunk_rows)"
            ),
        }
    }

    /// Entries under their full names (`corank.engine`), as `SHOW` and `SHOW ALL` list them.
    fn entries(&self) -> Vec<ConfigEntry> {
        Self::ENTRIES
            .iter()
            .map(|(name, description)| ConfigEntry { key: format!("{}.{name}", Self::PREFIX), value: Some(self.value(name)), description })
            .collect()
    }
}

impl ConfigExtension for CoRankConfig {
    const PREFIX: &'static str = "corank";
}

/// The merge settings a node carries (from [`CoRankConfig`] when the rule made it).
/// [`CoRankMergeExec`](super::CoRankMergeExec) has an example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeSettings {
    /// Engine, kernel, devices and `gpu_min_rows` (`corank.engine`, `corank.kernel`,
    /// `corank.devices`, `corank.gpu_min_rows`).
    pub engine: EngineOptions,
    /// Rows buffered per input partition before a round (`corank.window_rows`).
    pub window_rows: usize,
}

impl Default for MergeSettings {
    fn default() -> Self {
        Self::try_from(&CoRankConfig::default()).expect("the default engine name parses")
    }
}

impl TryFrom<&CoRankConfig> for MergeSettings {
    type Error = crate::Error;
    fn try_from(c: &CoRankConfig) -> crate::Result<Self> {
        let engine = EngineOptions {
            engine: c.engine.parse()?,
            kernel: c.kernel.parse()?,
            devices: c.devices.parse()?,
            gpu_min_rows: c.gpu_min_rows,
            ..EngineOptions::default()
        };
        Ok(Self { engine, window_rows: c.window_rows.max(1) })
    }
}

/// The `corank.*` settings of a plan, parsed once (by the rule) into what the nodes use.
///
/// ```
/// use corank::datafusion::{with_corank_config, CoRankSettings};
/// use corank::Engine;
/// use datafusion::prelude::SessionConfig;
///
/// let config = with_corank_config(SessionConfig::new()).set_str("corank.engine", "cpu");
/// let settings = CoRankSettings::from_options(config.options())?;
/// assert_eq!(settings.merge.engine.engine, Engine::Cpu);
/// # Ok::<(), corank::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoRankSettings {
    /// `corank.enabled`.
    pub enabled: bool,
    /// `corank.sort`.
    pub sort: bool,
    /// The engine and window of both nodes.
    pub merge: MergeSettings,
    /// `corank.check_sorted` (the merge node).
    pub check_sorted: bool,
    /// `corank.sort_chunk_rows` (the sort node).
    pub sort_chunk_rows: usize,
}

impl TryFrom<&CoRankConfig> for CoRankSettings {
    type Error = crate::Error;
    fn try_from(c: &CoRankConfig) -> crate::Result<Self> {
        Ok(Self {
            enabled: c.enabled,
            sort: c.sort,
            merge: MergeSettings::try_from(c)?,
            check_sorted: c.check_sorted,
            sort_chunk_rows: c.sort_chunk_rows,
        })
    }
}

impl CoRankSettings {
    /// The settings of `options`: its `corank.*` extension; else `corank.*` entries of
    /// another extension (settings that crossed DataFusion's FFI arrive as datafusion-ffi's
    /// `FFI_ExtensionOptions`, each entry under its full name, behind the namespace
    /// `datafusion_ffi.` where the host's options were converted once more); else the
    /// defaults.
    pub fn from_options(options: &ConfigOptions) -> crate::Result<Self> {
        if let Some(c) = options.extensions.get::<CoRankConfig>() {
            return Self::try_from(c);
        }
        let mut c = CoRankConfig::default();
        for (_, extension) in options.extensions.iter() {
            for entry in extension.entries() {
                let key = entry.key.strip_prefix("datafusion_ffi.").unwrap_or(&entry.key);
                if let (Some(name), Some(value)) = (key.strip_prefix("corank."), &entry.value) {
                    c.set(name, value).map_err(|e| crate::Error::InvalidArgument(e.strip_backtrace()))?;
                }
            }
        }
        Self::try_from(&c)
    }
}
