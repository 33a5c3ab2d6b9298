//! DataFusion integration: the `CoRankMergeExec` plan node, the optimizer rule that swaps
//! it in for `SortPreservingMergeExec`, the `corank.*` settings, and one call that
//! registers it all.
//!
//! ```no_run
//! # async fn run() -> datafusion::common::Result<()> {
//! use datafusion::prelude::SessionConfig;
//! let ctx = corank::datafusion::session_context(SessionConfig::new());
//! ctx.sql("SET corank.engine = 'cpu'").await?;
//! let df = ctx.sql("SELECT * FROM t ORDER BY k").await?;
//! # Ok(()) }
//! ```

pub mod codec;
pub mod config;
pub mod exec;
pub mod rule;
pub mod stream;

pub use codec::CoRankCodec;
pub use config::CoRankConfig;
pub use exec::{CoRankMergeExec, MergeSettings};
pub use rule::CoRankRule;

use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::sync::Arc;

/// The default physical optimizer rules with [`CoRankRule`] inserted just before
/// `SanityCheckPlan` (appended at the end if that rule is absent).
pub fn optimizer_rules() -> Vec<Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = PhysicalOptimizer::new().rules;
    let at = rules.iter().position(|r| r.name() == "SanityCheckPlan").unwrap_or(rules.len());
    rules.insert(at, Arc::new(CoRankRule));
    rules
}

/// Registers corank on a session builder: the `corank.*` settings and the rule. Call it
/// after `with_default_features()`; it sets the physical optimizer rules.
pub fn register(builder: SessionStateBuilder, config: SessionConfig) -> SessionStateBuilder {
    let config = if config.options().extensions.get::<CoRankConfig>().is_some() {
        config
    } else {
        config.with_option_extension(CoRankConfig::default())
    };
    builder.with_config(config).with_physical_optimizer_rules(optimizer_rules())
}

/// A `SessionContext` with DataFusion's defaults and corank registered.
pub fn session_context(config: SessionConfig) -> SessionContext {
    let state = register(SessionStateBuilder::new().with_default_features(), config).build();
    SessionContext::new_with_state(state)
}
