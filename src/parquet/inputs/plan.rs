//! The merge's plan from the footers: the inputs opened, their schemas matched, the key
//! settled, the files split into runs.

use super::runs::{common_declared_order, continues, declared_order};
use super::schema::{check_intervals_kept, check_same_schema, merge_field_metadata, top_level_leaf, union_schema};
use super::{decoded_bytes, decoder_bytes, open_input};
use super::{InputFile, MergePlan, PlanOptions, Run};
use crate::error::{Error, Result};
use crate::sort_key::SortKey;
use arrow::datatypes::SchemaRef;
use std::path::PathBuf;
use std::sync::Arc;

/// `k DESC NULLS LAST, j ASC NULLS LAST`: keys as [`parse_order_by`](crate::parquet::parse_order_by)
/// takes them.
pub fn show_keys(keys: &[SortKey]) -> String {
    keys.iter()
        .map(|k| {
            let dir = if k.options.descending { "DESC" } else { "ASC" };
            let nulls = if k.options.nulls_first { "NULLS FIRST" } else { "NULLS LAST" };
            let plain = !k.column.is_empty() && !k.column.contains(|c: char| c.is_whitespace() || c == ',' || c == '"');
            let name = if plain { k.column.clone() } else { format!("\"{}\"", k.column.replace('"', "\"\"")) };
            format!("{name} {dir} {nulls}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Opens `paths`, checks that their schemas agree, settles the key (`by`, else the common
/// `sorting_columns`) and splits the files into runs. Every run's order is checked while
/// it streams (see the module doc). The [`corank::parquet`](crate::parquet) example calls it.
pub fn plan_merge(paths: &[PathBuf], by: Option<Vec<SortKey>>) -> Result<MergePlan> {
    plan_merge_with(paths, by, &PlanOptions::default())
}

/// [`plan_merge`] with options.
pub fn plan_merge_with(paths: &[PathBuf], by: Option<Vec<SortKey>>, options: &PlanOptions) -> Result<MergePlan> {
    if paths.is_empty() {
        return Err(Error::InvalidArgument("no input files".into()));
    }
    let mut files: Vec<InputFile> = paths.iter().map(|p| open_input(p)).collect::<Result<_>>()?;
    super::types::settle_int96(&mut files)?;
    let schema = if options.union_by_name { union_schema(&files)? } else { merge_field_metadata(&check_same_schema(&files)?, &files) };
    // Hive partitions: columns from the paths, set on every batch read from a file.
    let partitions = super::hive::detect(paths, options.hive_partitioning, &options.hive_types)?;
    let (schema, hive_partitions) = match partitions {
        Some(p) => {
            let shown: Vec<String> = p.fields.iter().map(|f| format!("{} ({})", f.name(), f.data_type())).collect();
            log::info!("Hive partition columns from the paths: {}", shown.join(", "));
            for (f, partition) in files.iter_mut().zip(p.files.iter()) {
                f.partition = Some(partition.clone());
            }
            (super::hive::extend_schema(&schema, &p), p.fields.iter().map(|f| f.name().clone()).collect())
        }
        None => (schema, Vec::new()),
    };
    let schema: SchemaRef = Arc::new(schema);
    let keys = match by {
        Some(keys) => keys,
        None => common_declared_order(&files)?,
    };
    for k in &keys {
        let Ok(field) = schema.field_with_name(&k.column) else {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(Error::InvalidArgument(format!("sort column '{}' is not in the inputs (columns: {})", k.column, names.join(", "))));
        };
        if !crate::keys::is_supported(field.data_type()) {
            return Err(Error::UnsupportedType { column: k.column.clone(), data_type: field.data_type().clone() });
        }
        let partition = hive_partitions.contains(&k.column);
        if let Some(f) =
            files.iter().filter(|_| !partition).find(|f| top_level_leaf(&f.stored_schema, &k.column).is_some_and(super::types::is_interval))
        {
            return Err(Error::InvalidArgument(format!(
                "sort column '{}' is a Parquet INTERVAL (in {}): intervals have no order corank shares with other engines \
                 (a month has no fixed length in days), so corank cannot sort by one",
                k.column,
                f.path.display()
            )));
        }
        // The merge could order a nested key, but the output's `sorting_columns` name leaf
        // columns, and a list or struct is none.
        if field.data_type().is_nested() {
            return Err(Error::InvalidArgument(format!(
                "sort column '{}' has the nested type {}: Parquet's sorting_columns name leaf columns, so corank orders files \
                 by top-level primitive columns",
                k.column,
                field.data_type()
            )));
        }
    }

    let mut runs = Vec::new();
    let mut total_rows = 0;
    let mut decoded: u64 = 0;
    for (fi, f) in files.iter().enumerate() {
        let row_groups = f.metadata.metadata().row_groups();
        let joins = continues(f, &keys);
        let mut current: Option<Run> = None;
        for (g, rg) in row_groups.iter().enumerate() {
            let rows = rg.num_rows() as usize;
            total_rows += rows;
            if rows == 0 {
                continue;
            }
            let bytes = decoded_bytes(f, g);
            let decoder = decoder_bytes(f, g);
            decoded += bytes;
            let declared = declared_order(f, rg).is_some_and(|d| d.len() >= keys.len() && d[..keys.len()] == keys[..]);
            match &mut current {
                Some(run) if *run.row_groups.last().unwrap() + 1 == g && joins[g - 1] => {
                    run.row_groups.push(g);
                    run.row_group_rows.push(rows);
                    run.declared &= declared;
                    run.decoded_bytes += bytes;
                    run.decoder_bytes = run.decoder_bytes.max(decoder);
                }
                _ => {
                    runs.extend(current.take());
                    current = Some(Run {
                        file: fi,
                        row_groups: vec![g],
                        row_group_rows: vec![rows],
                        declared,
                        decoded_bytes: bytes,
                        decoder_bytes: decoder,
                    });
                }
            }
        }
        runs.extend(current);
    }
    check_intervals_kept(&files, &schema)?;
    let total_bytes = files.iter().map(|f| f.size).sum();
    let row_bytes = (decoded / total_rows.max(1) as u64).max(1) as usize;
    Ok(MergePlan { files, schema, keys, runs, total_rows, total_bytes, row_bytes, union_by_name: options.union_by_name, hive_partitions })
}
