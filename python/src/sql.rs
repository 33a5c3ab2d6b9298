//! SQL from datafusion-python: the capsules its `SessionContext` imports through
//! DataFusion's FFI (`datafusion-ffi`, the version datafusion-python 55 is built with).
//!
//! - [`Rule`]: `__datafusion_physical_optimizer_rule__`, corank's rule for plans seen
//!   across the FFI (`corank::datafusion::CoRankForeignRule`: the host's merge node and
//!   its `LIMIT` stay, corank's merge goes below it; sorts without a fetch become corank's).
//! - [`Settings`]: `__datafusion_extension_options__`, the `corank.*` settings in the
//!   session config, so `SET corank.engine = 'cpu'` works in SQL.
//! - [`SortedRowGroups`]: `__datafusion_table_provider__`, corank's table of sorted row
//!   groups (`corank::datafusion::SortedRowGroupsTable`).
//!
//! Plans and streams of corank's nodes run on the runtime of the streaming merge
//! ([`crate::stream::runtime`]), which the FFI enters wherever the host calls into them.

use crate::errors::to_py;
use crate::options::parse_by;
use corank::datafusion::{CoRankConfig, CoRankForeignRule, SortedRowGroupsTable};
use datafusion::common::Result;
use datafusion::common::config::{ConfigOptions, ExtensionOptions};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion_ffi::config::extension_options::FFI_ExtensionOptions;
use datafusion_ffi::execution_plan::{FFI_ExecutionPlan, ForeignExecutionPlan};
use datafusion_ffi::physical_optimizer::FFI_PhysicalOptimizerRule;
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
use datafusion_ffi::table_provider::FFI_TableProvider;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::runtime::Handle;

/// corank's physical optimizer rule for a datafusion-python session
/// (`SessionContext.add_physical_optimizer_rule`).
#[pyclass(module = "corank._corank", frozen)]
pub struct Rule;

#[pymethods]
impl Rule {
    #[new]
    fn new() -> Self {
        Rule
    }

    fn __datafusion_physical_optimizer_rule__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let handle = crate::stream::runtime().handle().clone();
        let rule = FFI_PhysicalOptimizerRule::new(Arc::new(OnRuntime(handle.clone())), Some(handle));
        PyCapsule::new_with_value(py, rule, c"datafusion_physical_optimizer_rule")
    }

    fn __repr__(&self) -> &'static str {
        "corank.datafusion.Rule()"
    }
}

/// [`CoRankForeignRule`], whose nodes run on corank's runtime.
///
/// The host's nodes take new children across the FFI without a runtime, so corank's nodes
/// below them would run on the host's threads, outside any runtime of corank's (whose
/// tasks need one). Each of corank's nodes right below a host's node is handed over
/// wrapped with the runtime, as datafusion-ffi does for the children of a plan it exports.
#[derive(Debug)]
struct OnRuntime(Handle);

impl PhysicalOptimizerRule for OnRuntime {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = CoRankForeignRule.optimize(plan, config)?;
        plan.transform_up(|node| {
            if !node.is::<ForeignExecutionPlan>() || node.children().iter().all(|c| c.is::<ForeignExecutionPlan>()) {
                return Ok(Transformed::no(node));
            }
            let children = node
                .children()
                .into_iter()
                .map(|child| {
                    if child.is::<ForeignExecutionPlan>() {
                        return Ok(Arc::clone(child));
                    }
                    let exported = FFI_ExecutionPlan::new(Arc::clone(child), Some(self.0.clone()));
                    Ok(Arc::new(ForeignExecutionPlan::try_from(exported)?) as Arc<dyn ExecutionPlan>)
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Transformed::yes(replace_children_if_necessary(node, children)?))
        })
        .data()
    }

    fn name(&self) -> &str {
        CoRankForeignRule.name()
    }

    fn schema_check(&self) -> bool {
        CoRankForeignRule.schema_check()
    }
}

/// The `corank.*` settings for a datafusion-python session config
/// (`SessionConfig.with_extension`), checked as corank checks them.
#[pyclass(module = "corank._corank", frozen)]
pub struct Settings {
    config: CoRankConfig,
}

#[pymethods]
impl Settings {
    /// `settings`: names without the `corank.` prefix (`engine`, `window_rows`, ...) and
    /// their values as SQL's `SET` takes them.
    #[new]
    #[pyo3(signature = (settings = BTreeMap::new()))]
    fn new(settings: BTreeMap<String, String>) -> PyResult<Self> {
        let mut config = CoRankConfig::default();
        for (name, value) in &settings {
            config.set(name, value).map_err(|e| to_py(corank::Error::InvalidArgument(e.strip_backtrace())))?;
        }
        Ok(Settings { config })
    }

    /// Every setting and its value, under its full name (`corank.engine`).
    fn entries(&self) -> BTreeMap<String, String> {
        self.config.entries().into_iter().filter_map(|e| Some((e.key, e.value?))).collect()
    }

    fn __datafusion_extension_options__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        // Under the names SQL's `SET` uses (`corank.engine`), which the entries carry already
        // (`add_config` would prefix them once more).
        let mut options = FFI_ExtensionOptions::default();
        for entry in self.config.entries() {
            if let Some(value) = entry.value {
                options.set(&entry.key, &value).map_err(|e| PyValueError::new_err(e.strip_backtrace()))?;
            }
        }
        PyCapsule::new_with_value(py, options, c"datafusion_extension_options")
    }
}

/// Parquet files whose row groups are each sorted, as one table whose partitions are the
/// row groups (`corank::datafusion::SortedRowGroupsTable`), for
/// `SessionContext.register_table`.
#[pyclass(module = "corank._corank", frozen)]
pub struct SortedRowGroups {
    table: Arc<SortedRowGroupsTable>,
}

#[pymethods]
impl SortedRowGroups {
    /// `paths`: Parquet files, directories or glob patterns (local: the table reads its
    /// files' footers with the file system); `by`: their order as SQL `ORDER BY` text, or
    /// `None` to read it from the row groups' `sorting_columns`.
    #[new]
    #[pyo3(signature = (paths, by = None))]
    fn new(py: Python<'_>, paths: Vec<String>, by: Option<String>) -> PyResult<Self> {
        let table = py.detach(|| {
            if let Some(url) = paths.iter().find(|p| corank::parquet::store::is_url(std::path::Path::new(p))) {
                return Err(corank::Error::InvalidArgument(format!("{url}: the table of sorted row groups reads local files only")));
            }
            let files: Vec<PathBuf> = corank::parquet::expand_inputs(&paths)?;
            let declared = by.as_deref().map(parse_by).transpose()?;
            SortedRowGroupsTable::try_new(&files, declared)
        });
        Ok(SortedRowGroups { table: Arc::new(table.map_err(to_py)?) })
    }

    /// The order of every row group, as `ORDER BY` text.
    #[getter]
    fn order(&self) -> String {
        corank::parquet::show_keys(self.table.order())
    }

    /// The number of row groups (partitions of a scan).
    #[getter]
    fn num_row_groups(&self) -> usize {
        self.table.num_row_groups()
    }

    /// `session`: the host's session, or its logical extension codec (what datafusion-python
    /// passes, depending on where the table is registered).
    fn __datafusion_table_provider__<'py>(&self, py: Python<'py>, session: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyCapsule>> {
        let codec = logical_codec(session)?;
        let handle = crate::stream::runtime().handle().clone();
        let provider = FFI_TableProvider::new_with_ffi_codec(Arc::clone(&self.table) as _, false, Some(handle), codec);
        PyCapsule::new_with_value(py, provider, c"datafusion_table_provider")
    }
}

/// The host's logical extension codec, read off its session (or given as the capsule).
fn logical_codec(session: Bound<'_, PyAny>) -> PyResult<FFI_LogicalExtensionCodec> {
    const NAME: &std::ffi::CStr = c"datafusion_logical_extension_codec";
    let getter = "__datafusion_logical_extension_codec__";
    let capsule = if session.hasattr(getter)? { session.getattr(getter)?.call0()? } else { session };
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| PyValueError::new_err("expected a datafusion-python session or its logical extension codec"))?;
    let pointer = capsule.pointer_checked(Some(NAME))?;
    // SAFETY: the capsule has the codec's name, under which datafusion-python stores an
    // `FFI_LogicalExtensionCodec` (datafusion-ffi 55) that lives as long as the capsule,
    // which `capsule` keeps alive while the codec is cloned.
    let codec = unsafe { pointer.cast::<FFI_LogicalExtensionCodec>().as_ref() };
    Ok(codec.clone())
}
