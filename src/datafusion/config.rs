//! corank's settings as a DataFusion `ConfigExtension`, so SQL can say
//! `SET corank.enabled = false`, `SET corank.engine = 'cpu'`, `SET corank.window_rows = 65536`,
//! `SET corank.gpu_min_rows = 1048576`.

use datafusion::common::config::ConfigExtension;
use datafusion::common::extensions_options;

extensions_options! {
    /// corank settings (prefix `corank.`).
    pub struct CoRankConfig {
        /// Replace plan-level SortPreservingMergeExec nodes with CoRankMergeExec.
        pub enabled: bool, default = true
        /// Engine: 'auto' (GPU for large rounds where one is usable), 'cpu' or 'gpu'.
        pub engine: String, default = "auto".to_string()
        /// Rows buffered per input partition before each merge round. Memory stays within
        /// about window_rows x partitions rows (plus one batch per partition).
        pub window_rows: usize, default = 1 << 20
        /// With engine 'auto', merge rounds of at least this many rows run on the GPU.
        pub gpu_min_rows: usize, default = crate::merge::engine::GPU_MIN_KEYS
    }
}

impl ConfigExtension for CoRankConfig {
    const PREFIX: &'static str = "corank";
}
