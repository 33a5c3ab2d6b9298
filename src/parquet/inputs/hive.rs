//! Hive-partitioned inputs (`…/date=2026-12-01/region=eu/part-0.parquet`): the `key=value`
//! directory names of every input's path become columns, each file's rows carrying its
//! path's values ([`HivePartitioning`], [`PlanOptions::hive_partitioning`]).
//!
//! **Detection** follows DuckDB's `hive_partitioning` auto-detection: the `key=value`
//! directory names of each path as given (or as expanded from a directory, prefix or glob;
//! the file's own name is never one), in path order, are its partitions; when the first file
//! has some and every file has the same keys (each once, in any order), the keys become
//! columns after the files' own, in the first file's path order. Otherwise (`auto`) the
//! files are read as they are; `true` makes that an error naming the file, `false` never
//! looks. Like DuckDB the whole path counts: a `key=value` directory above the directory or
//! prefix named on the command line is a partition too.
//!
//! **Values**: the text after the first `=`, percent-decoded (`a%2Fb` is `a/b`; the key is
//! taken as it is, as DuckDB does); `__HIVE_DEFAULT_PARTITION__` (what Hive and Spark write
//! for NULL) is null, an empty value the empty string.
//!
//! **Types**, per key over all files, nulls aside: Int64 where every value is an integer as
//! it prints (`-3`, `42`; not `007` or `+1`, whose text a number would not keep), else
//! Date32 where every value is an ISO date `YYYY-MM-DD`, else Utf8 (also where every value
//! is null). A column is nullable where any file's value is null.
//!
//! **A key that is also a column of the files** replaces that column, in its place, with
//! the partition's values (DuckDB does the same), and a warning says so.
//!
//! Partition columns are in the plan's schema like any other ([`MergePlan::hive_partitions`]
//! names them), so `--by` may name them; every batch read from an input gets them
//! ([`FilePartition::apply`]) before it is fitted to the plan's schema. Row groups of such
//! inputs are never copied unchanged (passthrough): they lack the columns.
//!
//! [`PlanOptions::hive_partitioning`]: super::PlanOptions::hive_partitioning
//! [`MergePlan::hive_partitions`]: super::MergePlan::hive_partitions

use crate::error::{Error, Result};
use arrow::array::{new_null_array, ArrayRef, Date32Array, Int64Array, RecordBatch, RecordBatchOptions, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// Whether `key=value` directories of the inputs' paths become columns
/// ([`PlanOptions::hive_partitioning`](super::PlanOptions::hive_partitioning); docs/cli.md,
/// "Hive partitions"). `FromStr` takes DuckDB's `true` and `false`, and `auto` (also
/// `always`/`on`, `never`/`off`), in any case.
///
/// A path's partitions are its `key=value` directory names (the whole path as given or as
/// expanded, as DuckDB reads it; not the file's name), the value percent-decoded and
/// `__HIVE_DEFAULT_PARTITION__` null. Where every path has the same keys, they become
/// columns after the files' own (in the first path's order), typed Int64 where every value
/// is an integer as it prints, else Date32 where every value is `YYYY-MM-DD`, else Utf8. A
/// key that is also a column of the files replaces it in its place, as in DuckDB.
/// [`MergePlan::hive_partitions`](super::MergePlan::hive_partitions) names those found.
///
/// ```
/// use corank::parquet::{HivePartitioning, PlanOptions};
///
/// let options = PlanOptions { hive_partitioning: "false".parse()?, ..Default::default() };
/// assert_eq!(options.hive_partitioning, HivePartitioning::Never);
/// # Ok::<(), corank::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HivePartitioning {
    /// Columns where every path has the same `key=value` directories, else none.
    #[default]
    Auto,
    /// Never: paths are only paths.
    Never,
    /// Always: a path without the first path's keys is an error.
    Always,
}

impl FromStr for HivePartitioning {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(HivePartitioning::Auto),
            "true" | "always" | "on" => Ok(HivePartitioning::Always),
            "false" | "never" | "off" => Ok(HivePartitioning::Never),
            other => Err(Error::InvalidArgument(format!("hive partitioning \"{other}\": use auto, true or false"))),
        }
    }
}

impl fmt::Display for HivePartitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HivePartitioning::Auto => "auto",
            HivePartitioning::Never => "false",
            HivePartitioning::Always => "true",
        })
    }
}

/// What Hive and Spark write for a null partition value.
const NULL_VALUE: &str = "__HIVE_DEFAULT_PARTITION__";

/// One partition value, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Date(i32),
    Text(String),
}

/// One file's partition columns and its value of each.
#[derive(Debug, PartialEq)]
pub(crate) struct FilePartition {
    pub fields: Vec<FieldRef>,
    pub values: Vec<Value>,
}

impl FilePartition {
    /// `batch` (read from this file) with the partition columns set: a column of the same
    /// name replaced in its place, the others appended, every row the file's value.
    pub(crate) fn apply(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let rows = batch.num_rows();
        let mut fields: Vec<FieldRef> = batch.schema().fields().iter().cloned().collect();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for (field, value) in self.fields.iter().zip(&self.values) {
            let column = constant(field.data_type(), value, rows);
            match fields.iter().position(|f| f.name() == field.name()) {
                Some(i) => (fields[i], columns[i]) = (field.clone(), column),
                None => {
                    fields.push(field.clone());
                    columns.push(column);
                }
            }
        }
        let schema = Arc::new(Schema::new_with_metadata(fields, batch.schema().metadata().clone()));
        Ok(RecordBatch::try_new_with_options(schema, columns, &RecordBatchOptions::new().with_row_count(Some(rows)))?)
    }

    /// Whether `name` is one of the partition columns.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.fields.iter().any(|f| f.name() == name)
    }
}

/// `rows` copies of `value` as an array of `data_type` (the column's type, which `value`
/// was parsed as).
fn constant(data_type: &DataType, value: &Value, rows: usize) -> ArrayRef {
    match value {
        Value::Null => new_null_array(data_type, rows),
        Value::Int(v) => Arc::new(Int64Array::from_value(*v, rows)),
        Value::Date(d) => Arc::new(Date32Array::from_value(*d, rows)),
        Value::Text(s) => Arc::new(StringArray::from_iter_values(std::iter::repeat_n(s.as_str(), rows))),
    }
}

/// The partitions found: the columns, and each file's values (in the order of the paths).
#[derive(Debug)]
pub(crate) struct Partitions {
    pub fields: Vec<FieldRef>,
    pub files: Vec<Arc<FilePartition>>,
}

/// The `key=value` directory names of `path` in path order: the key as it is, the value
/// percent-decoded, `None` for `__HIVE_DEFAULT_PARTITION__`. A URL's scheme and bucket (or
/// host) are not directories, the file's own name is none.
pub(crate) fn path_partitions(path: &Path) -> Vec<(String, Option<String>)> {
    let text = path.to_string_lossy();
    // `s3://bucket/a=1/f.parquet`: the key part only.
    let text = match text.split_once("://") {
        Some((_, rest)) if crate::parquet::store::is_url(path) => rest.split_once('/').map_or("", |(_, key)| key),
        _ => &text,
    };
    let separators: &[char] = if cfg!(windows) { &['/', '\\'] } else { &['/'] };
    let mut names: Vec<&str> = text.split(separators).collect();
    names.pop(); // the file's name
    names
        .into_iter()
        .filter_map(|name| {
            let (key, value) = name.split_once('=')?;
            if key.is_empty() {
                return None;
            }
            let value = if value == NULL_VALUE { None } else { Some(percent_decode(value)) };
            Some((key.to_string(), value))
        })
        .collect()
}

/// `%XX` sequences decoded; the text as it is where they do not decode to UTF-8.
fn percent_decode(text: &str) -> String {
    String::from_utf8(percent_decode_bytes(text)).unwrap_or_else(|_| text.to_string())
}

/// The bytes of `text` with its `%XX` sequences decoded (a `%` not followed by two hex
/// digits stays as it is). Also decodes object-store locations (`file_order`).
pub(crate) fn percent_decode_bytes(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// The partitions of `paths` as `mode` says (see the module doc): `None` where there are
/// none (or `mode` is [`HivePartitioning::Never`]).
pub(crate) fn detect(paths: &[PathBuf], mode: HivePartitioning) -> Result<Option<Partitions>> {
    if mode == HivePartitioning::Never || paths.is_empty() {
        return Ok(None);
    }
    let parsed: Vec<Vec<(String, Option<String>)>> = paths.iter().map(|p| path_partitions(p)).collect();
    let first = &parsed[0];
    let refuse = |detail: String| -> Result<Option<Partitions>> {
        match mode {
            HivePartitioning::Always => Err(Error::InvalidArgument(format!("hive partitioning: {detail}"))),
            _ => {
                log::debug!("no Hive partitions: {detail}");
                Ok(None)
            }
        }
    };
    let keys: Vec<&str> = first.iter().map(|(k, _)| k.as_str()).collect();
    if keys.is_empty() {
        return refuse(format!("{} has no key=value directory", paths[0].display()));
    }
    if let Some(k) = keys.iter().enumerate().find_map(|(i, k)| keys[..i].contains(k).then_some(k)) {
        return refuse(format!("{} has the key '{k}' twice", paths[0].display()));
    }
    // Per file, its value of each key in the first file's order.
    let mut texts: Vec<Vec<Option<String>>> = Vec::with_capacity(paths.len());
    for (path, parts) in paths.iter().zip(&parsed) {
        let mut own: Vec<&str> = parts.iter().map(|(k, _)| k.as_str()).collect();
        own.sort_unstable();
        let mut wanted = keys.clone();
        wanted.sort_unstable();
        if own != wanted {
            let show = |keys: &[&str]| if keys.is_empty() { "none".to_string() } else { keys.join(", ") };
            return refuse(format!(
                "{} has the partition keys {} but {} has {}",
                path.display(),
                show(&parts.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>()),
                paths[0].display(),
                show(&keys)
            ));
        }
        texts.push(keys.iter().map(|k| parts.iter().find(|(pk, _)| pk == k).and_then(|(_, v)| v.clone())).collect());
    }
    let mut fields = Vec::with_capacity(keys.len());
    let mut columns: Vec<Vec<Value>> = Vec::with_capacity(keys.len());
    for (c, key) in keys.iter().enumerate() {
        let values: Vec<Option<&str>> = texts.iter().map(|t| t[c].as_deref()).collect();
        let (data_type, typed) = infer(&values);
        let nullable = values.iter().any(Option::is_none);
        fields.push(Arc::new(Field::new(*key, data_type, nullable)));
        columns.push(typed);
    }
    let files = (0..paths.len())
        .map(|f| Arc::new(FilePartition { fields: fields.clone(), values: columns.iter().map(|c| c[f].clone()).collect() }))
        .collect();
    Ok(Some(Partitions { fields, files }))
}

/// One key's type over all files' values, and the values as that type (module doc).
fn infer(values: &[Option<&str>]) -> (DataType, Vec<Value>) {
    let present = || values.iter().flatten();
    let typed =
        |parse: &dyn Fn(&str) -> Option<Value>| -> Vec<Value> { values.iter().map(|v| v.and_then(parse).unwrap_or(Value::Null)).collect() };
    if present().next().is_some() && present().all(|v| parse_int(v).is_some()) {
        return (DataType::Int64, typed(&|v| parse_int(v).map(Value::Int)));
    }
    if present().next().is_some() && present().all(|v| parse_date(v).is_some()) {
        return (DataType::Date32, typed(&|v| parse_date(v).map(Value::Date)));
    }
    (DataType::Utf8, typed(&|v| Some(Value::Text(v.to_string()))))
}

/// An integer whose text is the one it prints as.
fn parse_int(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().filter(|v| v.to_string() == text)
}

/// `YYYY-MM-DD`, a real day, as days since 1970-01-01.
fn parse_date(text: &str) -> Option<i32> {
    let b = text.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |n, &c| c.is_ascii_digit().then(|| n * 10 + (c - b'0') as i64))
    };
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if d < 1 || d > days_in_month {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some((era * 146097 + doe - 719468) as i32)
}

/// The plan's schema with the partition columns: a field of the same name replaced in its
/// place (with a warning: the file's column is not read), the others appended in order.
pub(crate) fn extend_schema(schema: &Schema, partitions: &Partitions) -> Schema {
    let mut fields: Vec<FieldRef> = schema.fields().iter().cloned().collect();
    for field in &partitions.fields {
        match fields.iter().position(|f| f.name() == field.name()) {
            Some(i) => {
                log::warn!(
                    "column '{}' of the inputs is also a Hive partition key: its values are the paths' (as DuckDB reads them)",
                    field.name()
                );
                fields[i] = field.clone();
            }
            None => fields.push(field.clone()),
        }
    }
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(path: &str) -> Vec<(String, Option<String>)> {
        path_partitions(Path::new(path))
    }

    fn kv(k: &str, v: Option<&str>) -> (String, Option<String>) {
        (k.to_string(), v.map(str::to_string))
    }

    #[test]
    fn directory_names_are_parsed() {
        assert_eq!(parts("data/date=2026-12-01/k=3/part-0.parquet"), vec![kv("date", Some("2026-12-01")), kv("k", Some("3"))]);
        // The file's name, directories without `=` and empty keys are no partitions.
        assert_eq!(parts("a=1.parquet"), vec![]);
        assert_eq!(parts("/x/=1/y/f.parquet"), vec![]);
        // The value after the first `=`, percent-decoded; the key as it is.
        assert_eq!(parts("k%3Db=a%2Fb%20c=d/f.parquet"), vec![kv("k%3Db", Some("a/b c=d"))]);
        assert_eq!(parts("k=%zz%4/f.parquet"), vec![kv("k", Some("%zz%4"))]);
        assert_eq!(parts("k=%ff/f.parquet"), vec![kv("k", Some("%ff"))]);
        assert_eq!(parts("k=__HIVE_DEFAULT_PARTITION__/e=/f.parquet"), vec![kv("k", None), kv("e", Some(""))]);
        // A URL's bucket is not a directory, its key's directories are.
        assert_eq!(parts("s3://b=1/y=2026/f.parquet"), vec![kv("y", Some("2026"))]);
        assert_eq!(parts("/abs/r=9/x/k=v/f.parquet"), vec![kv("r", Some("9")), kv("k", Some("v"))]);
    }

    #[test]
    fn values_are_typed() {
        assert_eq!(infer(&[Some("1"), Some("-3"), None]), (DataType::Int64, vec![Value::Int(1), Value::Int(-3), Value::Null]));
        assert_eq!(infer(&[Some("1"), Some("007")]).0, DataType::Utf8);
        assert_eq!(infer(&[Some("+1")]).0, DataType::Utf8);
        assert_eq!(infer(&[Some("99999999999999999999")]).0, DataType::Utf8);
        assert_eq!(infer(&[Some("1970-01-02"), Some("2000-03-01")]), (DataType::Date32, vec![Value::Date(1), Value::Date(11017)]));
        assert_eq!(infer(&[Some("1969-12-31"), Some("2024-02-29")]).1, vec![Value::Date(-1), Value::Date(19782)]);
        assert_eq!(infer(&[Some("2023-02-29")]).0, DataType::Utf8);
        assert_eq!(infer(&[Some("2026-12-01"), Some("x")]).0, DataType::Utf8);
        assert_eq!(infer(&[None, None]), (DataType::Utf8, vec![Value::Null, Value::Null]));
        assert_eq!(infer(&[Some("")]).1, vec![Value::Text(String::new())]);
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn detection_needs_the_same_keys_everywhere() {
        let same = paths(&["d/a=1/b=x/f.parquet", "d/b=y/a=2/f.parquet"]);
        let p = detect(&same, HivePartitioning::Auto).unwrap().unwrap();
        let names: Vec<&str> = p.fields.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(p.files[1].values, vec![Value::Int(2), Value::Text("y".into())]);
        assert!(detect(&same, HivePartitioning::Never).unwrap().is_none());

        for odd in [
            &["d/a=1/f.parquet", "d/c=2/f.parquet"][..],
            &["d/a=1/f.parquet", "d/f.parquet"],
            &["d/f.parquet", "d/a=1/f.parquet"],
            &["d/a=1/a=2/f.parquet"],
        ] {
            let odd = paths(odd);
            assert!(detect(&odd, HivePartitioning::Auto).unwrap().is_none(), "{odd:?}");
            let e = detect(&odd, HivePartitioning::Always).unwrap_err().to_string();
            assert!(e.contains("hive partitioning"), "{e}");
        }
        let e = detect(&paths(&["d/a=1/f.parquet", "d/c=2/f.parquet"]), HivePartitioning::Always).unwrap_err().to_string();
        assert!(e.contains("d/c=2/f.parquet has the partition keys c but d/a=1/f.parquet has a"), "{e}");
    }

    #[test]
    fn partitions_are_applied_to_batches() {
        let p =
            detect(&paths(&["a=1/k=x/f.parquet", "a=__HIVE_DEFAULT_PARTITION__/k=y/f.parquet"]), HivePartitioning::Auto).unwrap().unwrap();
        assert!(p.fields[0].is_nullable() && !p.fields[1].is_nullable());
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, false), Field::new("v", DataType::Int32, false)]));
        let column: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![7, 8]));
        let batch = RecordBatch::try_new(schema, vec![column.clone(), column]).unwrap();
        let out = p.files[1].apply(batch).unwrap();
        let names: Vec<String> = out.schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["k", "v", "a"]);
        assert_eq!(out.column(0).as_ref(), &StringArray::from(vec!["y", "y"]) as &dyn arrow::array::Array);
        assert_eq!(out.column(2).null_count(), 2);
        assert_eq!(extend_schema(&Schema::new(vec![Field::new("k", DataType::Int32, false)]), &p).fields().len(), 2);
    }
}
