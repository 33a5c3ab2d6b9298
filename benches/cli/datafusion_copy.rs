//! The stock DataFusion contender (and the floor): `COPY (SELECT * FROM t [ORDER BY k]) TO
//! OUT`, as `datafusion-cli` would run it (a listing table over the files, a default
//! session). The harness runs it in a child process of its own ([`super::contenders`]).

use super::args::DataFusionCopyArgs;
use corank::{Error, Result};
use datafusion::prelude::{ParquetReadOptions, SessionContext};

/// Runs the COPY of `args` to its end.
pub fn run(args: &DataFusionCopyArgs) -> Result<()> {
    let df_err =
        |e: datafusion::error::DataFusionError| Error::File { path: args.output.clone(), detail: format!("DataFusion's COPY: {e}") };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|source| Error::Io {
        path: None,
        context: "starting the tokio runtime".into(),
        source,
    })?;
    runtime.block_on(async {
        let ctx = SessionContext::new();
        let paths: Vec<String> = args.files.iter().map(|p| p.display().to_string()).collect();
        let df = ctx.read_parquet(paths, ParquetReadOptions::default()).await.map_err(df_err)?;
        ctx.register_table("t", df.into_view()).map_err(df_err)?;
        let order = if args.no_order { String::new() } else { format!(" ORDER BY \"{}\"", args.key) };
        let sql = format!(
            "COPY (SELECT * FROM t{order}) TO '{}' STORED AS PARQUET OPTIONS ('format.compression' 'zstd(3)')",
            args.output.display()
        );
        ctx.sql(&sql).await.map_err(df_err)?.collect().await.map_err(df_err)?;
        Ok(())
    })
}
