//! DataFusion integration: the `CoRankMergeExec` plan node, the optimizer rule that swaps
//! it in for `SortPreservingMergeExec` (and `CoRankSortExec` in for `SortExec`), the
//! `corank.*` settings, and one call that registers it all.
//!
//! ```no_run
//! # async fn run() -> datafusion::common::Result<()> {
//! use datafusion::prelude::SessionConfig;
//! let ctx = corank::datafusion::session_context(SessionConfig::new());
//! ctx.sql("SET corank.engine = 'cpu'").await?;
//! let df = ctx.sql("SELECT * FROM t ORDER BY k").await?;
//! # Ok(()) }
//! ```

#[cfg(feature = "ballista")]
pub mod ballista;
mod codec;
mod config;
#[cfg(feature = "distributed")]
pub mod distributed;
mod error;
mod exec;
mod file_order;
mod footers;
mod foreign_rule;
mod merge_inputs;
mod metrics;
mod row_groups;
mod rule;
mod sort_chunk;
mod sort_device;
mod sort_exec;
mod sort_merge;
mod sort_runs;
mod sort_spill;
mod sort_stream;
mod stream;

pub use codec::CoRankCodec;
pub use config::{CoRankConfig, CoRankSettings};
pub use exec::{CoRankMergeExec, MergeSettings};
pub use foreign_rule::CoRankForeignRule;
pub use row_groups::SortedRowGroupsTable;
pub use rule::CoRankRule;
pub use sort_exec::CoRankSortExec;

use datafusion::common::config::ConfigExtension;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::sync::Arc;

/// `rules` with [`CoRankRule`] inserted just before `SanityCheckPlan` (appended at the end
/// if that rule is absent); unchanged if it holds a `CoRankRule` already.
///
/// ```
/// use corank::datafusion::{optimizer_rules, with_corank_rule};
///
/// let rules = optimizer_rules(); // DataFusion's defaults with CoRankRule
/// let names: Vec<&str> = rules.iter().map(|r| r.name()).collect();
/// let at = names.iter().position(|n| *n == "SanityCheckPlan").unwrap();
/// assert_eq!(names[at - 1], "CoRankRule");
/// assert_eq!(with_corank_rule(rules.clone()).len(), rules.len()); // added once
/// ```
pub fn with_corank_rule(mut rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>) -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    if rules.iter().any(|r| r.name() == CoRankRule.name()) {
        return rules;
    }
    let at = rules.iter().position(|r| r.name() == "SanityCheckPlan").unwrap_or(rules.len());
    rules.insert(at, Arc::new(CoRankRule));
    rules
}

/// The default physical optimizer rules with [`CoRankRule`] inserted just before
/// `SanityCheckPlan`. [`with_corank_rule`] has an example.
pub fn optimizer_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    with_corank_rule(PhysicalOptimizer::new().rules)
}

/// `config` with the `corank.*` settings added (kept as they are if present) and the
/// session's file-order cache (created where the settings lack one).
///
/// ```
/// use corank::datafusion::{with_corank_config, CoRankConfig};
/// use datafusion::prelude::SessionConfig;
///
/// let config = with_corank_config(SessionConfig::new()).set_usize("corank.window_rows", 65536);
/// let corank = config.options().extensions.get::<CoRankConfig>().unwrap();
/// assert_eq!((corank.window_rows, corank.engine.as_str()), (65536, "auto"));
/// ```
pub fn with_corank_config(mut config: SessionConfig) -> SessionConfig {
    if let Some(c) = config.options_mut().extensions.get_mut::<CoRankConfig>() {
        c.ensure_file_order_cache();
        return config;
    }
    let mut c = CoRankConfig::default();
    c.ensure_file_order_cache();
    config.with_option_extension(c)
}

/// Registers corank on a `SessionStateBuilder`, the way other DataFusion extensions do:
///
/// ```no_run
/// use corank::datafusion::SessionStateBuilderExt;
/// use datafusion::execution::SessionStateBuilder;
/// use datafusion::prelude::{SessionConfig, SessionContext};
/// let state = SessionStateBuilder::new()
///     .with_config(SessionConfig::new().with_target_partitions(8))
///     .with_default_features()
///     .with_corank()
///     .build();
/// let ctx = SessionContext::new_with_state(state);
/// ```
pub trait SessionStateBuilderExt {
    /// Adds the `corank.*` settings to the builder's config (the default config if it has
    /// none; its other settings and extensions stay) and [`CoRankRule`] to its physical
    /// optimizer rules, just before `SanityCheckPlan` (DataFusion's default rules if it
    /// has none set; rules it has, set or appended, stay). Calling it twice is harmless.
    ///
    /// The settings also keep the builder's runtime env (the default one, set on the
    /// builder now, where it has none): the rule reads the footers of Parquet files in
    /// object stores through its object store registry, where
    /// `SessionContext::register_object_store` puts stores (docs/datafusion.md, "Object
    /// stores"). Set a runtime env of your own before this call: one set after it is the
    /// session's, but the rule does not read through it (it proves only local files sorted,
    /// and sorts the others' partitions).
    fn with_corank(self) -> Self;
}

impl SessionStateBuilderExt for SessionStateBuilder {
    fn with_corank(mut self) -> Self {
        let config = self.config().take().unwrap_or_default();
        // The runtime `build` would make where the builder has none.
        let runtime = Arc::clone(self.runtime_env().get_or_insert_with(|| Arc::new(RuntimeEnv::default())));
        let mut config = with_corank_config(config);
        if let Some(c) = config.options_mut().extensions.get_mut::<CoRankConfig>() {
            c.set_runtime(runtime);
        }
        *self.config() = Some(config);
        let rules = self.physical_optimizers().take().map(|o| o.rules).unwrap_or_else(|| PhysicalOptimizer::new().rules);
        self.with_physical_optimizer_rules(with_corank_rule(rules))
    }
}

/// Registers corank on a session builder with `config`: `config`'s `datafusion.*` options
/// replace the builder's, while the builder's own config extensions and session
/// extensions stay (where both carry the same config extension, `config`'s values win),
/// as do its optimizer rules; then [`SessionStateBuilderExt::with_corank`].
///
/// ```
/// use corank::datafusion::register;
/// use datafusion::execution::SessionStateBuilder;
/// use datafusion::prelude::{SessionConfig, SessionContext};
///
/// let builder = SessionStateBuilder::new().with_default_features();
/// let state = register(builder, SessionConfig::new().with_target_partitions(8)).build();
/// let ctx = SessionContext::new_with_state(state);
/// assert_eq!(ctx.copied_config().target_partitions(), 8);
/// ```
pub fn register(mut builder: SessionStateBuilder, config: SessionConfig) -> SessionStateBuilder {
    let merged = match builder.config().take() {
        None => config,
        Some(existing) => merge_config(existing, &config),
    };
    builder.with_config(merged).with_corank()
}

/// `base` with `over`'s `datafusion.*` options and config extensions laid over it.
fn merge_config(mut base: SessionConfig, over: &SessionConfig) -> SessionConfig {
    use datafusion::common::config::ConfigOptions;
    let ours = &base.options().extensions;
    let theirs = &over.options().extensions;
    let extensions = if ours.iter().all(|(p, _)| theirs.iter().any(|(q, _)| p == q)) {
        // `over` has every extension `base` has: its values win anyway.
        theirs.clone()
    } else {
        // Keep `base`'s, copy `over`'s values into those both have. A config extension can
        // only be added by its type: corank's is, others `base` lacks are dropped.
        let mut merged = ConfigOptions::default();
        merged.extensions = ours.clone();
        for (prefix, ext) in theirs.iter() {
            if ours.iter().any(|(p, _)| p == prefix) {
                for entry in ext.entries() {
                    let key = entry.key.strip_prefix(&format!("{prefix}.")).unwrap_or(&entry.key);
                    if let Some(value) = &entry.value {
                        let _ = merged.set(&format!("{prefix}.{key}"), value);
                    }
                }
            } else if let Some(c) = theirs.get::<CoRankConfig>().filter(|_| prefix == CoRankConfig::PREFIX) {
                merged.extensions.insert(c.clone());
            } else {
                log::warn!(
                    "corank::datafusion::register: the builder's config lacks the config extension '{prefix}' of the config given; dropped"
                );
            }
        }
        merged.extensions
    };
    let mut options = over.options().as_ref().clone();
    options.extensions = extensions;
    *base.options_mut() = options;
    base
}

/// Registers on `runtime` (a session's: `SessionContext::runtime_env`) the object store that
/// corank's own file functions and command line read `url` (an object's or a prefix's URL:
/// `s3://bucket/dir/`) through: built once per bucket or host from the provider's
/// environment variables and the options set with
/// [`set_storage_options`](crate::parquet::store::set_storage_options), or the store put
/// under its URL with [`register_object_store`](crate::parquet::store::register_object_store).
/// SQL over that bucket (`CREATE EXTERNAL TABLE .. LOCATION 's3://bucket/dir/'`) and
/// [`SortedRowGroupsTable::try_new_in_store`] then read with the credentials `corank merge`
/// uses. A store whose URL has a path (Azure's `https://account.blob...` forms) cannot be
/// registered so (DataFusion's registry keys stores by scheme and host): that is an error.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use corank::datafusion::{register_store, session_context};
/// use datafusion::prelude::SessionConfig;
/// let ctx = session_context(SessionConfig::new());
/// register_store(&ctx.runtime_env(), "s3://bucket/")?;
/// ctx.sql("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://bucket/dir/'").await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "object-store")]
pub fn register_store(runtime: &RuntimeEnv, url: &str) -> crate::Result<()> {
    let (store_url, store) = crate::parquet::store::store_of(url)?;
    let parsed = datafusion::execution::object_store::ObjectStoreUrl::parse(&store_url).map_err(|e| {
        crate::Error::InvalidArgument(format!(
            "{url}: its store ({store_url}) cannot be registered on a DataFusion runtime: {}",
            e.strip_backtrace()
        ))
    })?;
    runtime.register_object_store(parsed.as_ref(), store);
    Ok(())
}

/// A `SessionContext` with DataFusion's defaults and corank registered (`config`'s
/// extensions stay). The [module](self) doc has an example.
pub fn session_context(config: SessionConfig) -> SessionContext {
    let state = SessionStateBuilder::new().with_config(config).with_default_features().with_corank().build();
    SessionContext::new_with_state(state)
}
