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
//! is null). A column is nullable where any file's value is null. [`HiveTypes`]
//! (`--hive-types key=TYPE`, DuckDB's `hive_types`) names a key's type instead: every value
//! is cast from its text to it (Arrow's cast, which fails rather than yield a null), and a
//! value that does not cast is an error naming the file.
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

/// Partition keys' types chosen by hand ([`PlanOptions::hive_types`](super::PlanOptions::hive_types);
/// DuckDB's `hive_types`): `key=TYPE` pairs, separated by commas. A TYPE is a SQL name as
/// DuckDB spells it (`BIGINT`, `INTEGER`, `SMALLINT`, `TINYINT`, `UBIGINT`, `UINTEGER`,
/// `USMALLINT`, `UTINYINT`, `DOUBLE`, `FLOAT`/`REAL`, `DATE`, `TIMESTAMP`, `VARCHAR`/`TEXT`,
/// `BOOLEAN`, `DECIMAL(p,s)`), in any case, or an Arrow type as Arrow prints it (`Int32`,
/// `Timestamp(Millisecond, None)`). Each key must be a partition key of the inputs; the
/// keys not named are inferred.
///
/// ```
/// use arrow::datatypes::DataType;
/// use corank::parquet::HiveTypes;
///
/// let types: HiveTypes = "date=DATE, price=DECIMAL(10,2), region=Utf8".parse()?;
/// assert_eq!(types.get("price"), Some(&DataType::Decimal128(10, 2)));
/// assert_eq!(types.to_string(), "date=Date32,price=Decimal128(10, 2),region=Utf8");
/// # Ok::<(), corank::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HiveTypes(Vec<(String, DataType)>);

impl HiveTypes {
    /// The type named for `key`.
    pub fn get(&self, key: &str) -> Option<&DataType> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, t)| t)
    }

    /// Whether no type is named.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `self` with `other`'s pairs added (a key named again takes the later type).
    pub fn extend(&mut self, other: HiveTypes) {
        for (k, t) in other.0 {
            self.0.retain(|(own, _)| *own != k);
            self.0.push((k, t));
        }
    }

    /// The keys named, in order.
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

impl FromStr for HiveTypes {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let mut types = HiveTypes::default();
        for pair in split_top_level(s) {
            let pair = pair.trim();
            if pair.is_empty() {
                continue;
            }
            let Some((key, name)) = pair.split_once('=') else {
                return Err(Error::InvalidArgument(format!("hive types \"{pair}\": use key=TYPE")));
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(Error::InvalidArgument(format!("hive types \"{pair}\": no key before '='")));
            }
            types.extend(HiveTypes(vec![(key.to_string(), sql_type(name.trim())?)]));
        }
        Ok(types)
    }
}

impl fmt::Display for HiveTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<String> = self.0.iter().map(|(k, t)| format!("{k}={t}")).collect();
        f.write_str(&shown.join(","))
    }
}

/// `text` cut at the commas outside parentheses (`DECIMAL(10,2)` keeps its comma).
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A type's name as DuckDB spells it, or as Arrow prints it.
fn sql_type(name: &str) -> Result<DataType> {
    let upper = name.to_ascii_uppercase();
    let known = match upper.as_str() {
        "BIGINT" | "INT8" | "LONG" => Some(DataType::Int64),
        "INTEGER" | "INT" | "INT4" | "SIGNED" => Some(DataType::Int32),
        "SMALLINT" | "INT2" | "SHORT" => Some(DataType::Int16),
        "TINYINT" | "INT1" => Some(DataType::Int8),
        "UBIGINT" => Some(DataType::UInt64),
        "UINTEGER" => Some(DataType::UInt32),
        "USMALLINT" => Some(DataType::UInt16),
        "UTINYINT" => Some(DataType::UInt8),
        "DOUBLE" | "FLOAT8" => Some(DataType::Float64),
        "FLOAT" | "REAL" | "FLOAT4" => Some(DataType::Float32),
        "DATE" => Some(DataType::Date32),
        "TIMESTAMP" | "DATETIME" => Some(DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None)),
        "VARCHAR" | "TEXT" | "STRING" | "CHAR" | "BPCHAR" => Some(DataType::Utf8),
        "BOOLEAN" | "BOOL" | "LOGICAL" => Some(DataType::Boolean),
        _ => None,
    };
    if let Some(t) = known {
        return Ok(t);
    }
    if let Some(args) = upper.strip_prefix("DECIMAL(").or_else(|| upper.strip_prefix("NUMERIC(")).and_then(|r| r.strip_suffix(')')) {
        let (p, s) = args.split_once(',').unwrap_or((args, "0"));
        if let (Ok(p), Ok(s)) = (p.trim().parse::<u8>(), s.trim().parse::<i8>()) {
            if (1..=38).contains(&p) && s >= 0 && s as u8 <= p {
                return Ok(DataType::Decimal128(p, s));
            }
        }
        return Err(Error::InvalidArgument(format!("hive types: \"{name}\" is no DECIMAL(precision 1-38, scale 0-precision)")));
    }
    DataType::from_str(name).map_err(|_| {
        Error::InvalidArgument(format!(
            "hive types: unknown type \"{name}\" (BIGINT, INTEGER, DOUBLE, DATE, TIMESTAMP, VARCHAR, BOOLEAN, DECIMAL(p,s), ... or an Arrow type such as Int32)"
        ))
    })
}

/// What Hive and Spark write for a null partition value.
const NULL_VALUE: &str = "__HIVE_DEFAULT_PARTITION__";

/// One partition value, typed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Date(i32),
    Text(String),
    /// A value of a type named in [`HiveTypes`]: an array of one.
    Cast(ArrayRef),
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
        Value::Cast(one) => {
            let zeros = arrow::array::UInt32Array::from_value(0, rows);
            arrow::compute::take(one.as_ref(), &zeros, None).expect("index 0 of an array of one")
        }
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
/// With `types`, those keys' values are cast to the types named; naming a key that is
/// no partition (or types where there are no partitions) is an error.
pub(crate) fn detect(paths: &[PathBuf], mode: HivePartitioning, types: &HiveTypes) -> Result<Option<Partitions>> {
    let found = detect_untyped(paths, mode)?;
    let Some(texts) = found else {
        if let Some(key) = types.keys().next() {
            let why = match mode {
                HivePartitioning::Never => "Hive partitioning is off",
                _ => "the inputs' paths have no Hive partitions (--hive-partitioning=true says why)",
            };
            return Err(Error::InvalidArgument(format!("hive types name '{key}', but {why}")));
        }
        return Ok(None);
    };
    let (keys, texts) = texts;
    if let Some(key) = types.keys().find(|k| !keys.iter().any(|own| own == k)) {
        return Err(Error::InvalidArgument(format!(
            "hive types name '{key}', which is no partition key of the inputs ({})",
            keys.join(", ")
        )));
    }
    let mut fields = Vec::with_capacity(keys.len());
    let mut columns: Vec<Vec<Value>> = Vec::with_capacity(keys.len());
    for (c, key) in keys.iter().enumerate() {
        let values: Vec<Option<&str>> = texts.iter().map(|t| t[c].as_deref()).collect();
        let (data_type, typed) = match types.get(key) {
            Some(named) => (named.clone(), cast_all(key, named, &values, paths)?),
            None => infer(&values),
        };
        let nullable = values.iter().any(Option::is_none);
        fields.push(Arc::new(Field::new(key.as_str(), data_type, nullable)));
        columns.push(typed);
    }
    let files = (0..paths.len())
        .map(|f| Arc::new(FilePartition { fields: fields.clone(), values: columns.iter().map(|c| c[f].clone()).collect() }))
        .collect();
    Ok(Some(Partitions { fields, files }))
}

/// Every file's value of `key` cast to `data_type` (nulls stay null); an error names the
/// file whose value does not cast.
fn cast_all(key: &str, data_type: &DataType, values: &[Option<&str>], paths: &[PathBuf]) -> Result<Vec<Value>> {
    let options = arrow::compute::CastOptions { safe: false, ..Default::default() };
    values
        .iter()
        .zip(paths)
        .map(|(v, path)| match v {
            None => Ok(Value::Null),
            Some(text) => {
                let one = StringArray::from(vec![*text]);
                match arrow::compute::cast_with_options(&one, data_type, &options) {
                    Ok(cast) if cast.null_count() == 0 => Ok(Value::Cast(cast)),
                    _ => Err(Error::InvalidArgument(format!(
                        "{}: hive partition {key}={text} is not a {data_type} (--hive-types)",
                        path.display()
                    ))),
                }
            }
        })
        .collect()
}

/// The partition keys (in the first path's order) and, per file, its value text of each.
type KeyTexts = (Vec<String>, Vec<Vec<Option<String>>>);

/// The partition keys and each file's value texts, as `mode` detects them; `None` where
/// there are none.
fn detect_untyped(paths: &[PathBuf], mode: HivePartitioning) -> Result<Option<KeyTexts>> {
    if mode == HivePartitioning::Never || paths.is_empty() {
        return Ok(None);
    }
    let parsed: Vec<Vec<(String, Option<String>)>> = paths.iter().map(|p| path_partitions(p)).collect();
    let first = &parsed[0];
    let refuse = |detail: String| -> Result<Option<KeyTexts>> {
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
    Ok(Some((keys.iter().map(|k| k.to_string()).collect(), texts)))
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

    #[test]
    fn types_by_hand_are_parsed_and_cast() {
        let types: HiveTypes = "a=INTEGER, d=date,p=DECIMAL(10, 2),t=Timestamp(Millisecond, None)".parse().unwrap();
        assert_eq!(types.get("a"), Some(&DataType::Int32));
        assert_eq!(types.get("d"), Some(&DataType::Date32));
        assert_eq!(types.get("p"), Some(&DataType::Decimal128(10, 2)));
        assert_eq!(types.get("t"), Some(&DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None)));
        for bad in ["a", "=INT", "a=NUMBER", "a=DECIMAL(40,2)", "a=DECIMAL(5,6)"] {
            let e = bad.parse::<HiveTypes>().unwrap_err().to_string();
            assert!(e.contains("hive types"), "{bad}: {e}");
        }
        let mut later: HiveTypes = "a=BIGINT".parse().unwrap();
        later.extend("a=VARCHAR,b=DOUBLE".parse().unwrap());
        assert_eq!(later.to_string(), "a=Utf8,b=Float64");

        // `007` stays a number where the type says so; the other key is inferred.
        let files = paths(&["a=007/k=x/f.parquet", "a=__HIVE_DEFAULT_PARTITION__/k=y/f.parquet"]);
        let p = detect(&files, HivePartitioning::Auto, &"a=SMALLINT".parse().unwrap()).unwrap().unwrap();
        assert_eq!(p.fields[0].data_type(), &DataType::Int16);
        assert_eq!(p.fields[1].data_type(), &DataType::Utf8);
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, false)]));
        let column: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![1, 2, 3]));
        let batch = RecordBatch::try_new(schema, vec![column]).unwrap();
        let out = p.files[0].apply(batch.clone()).unwrap();
        assert_eq!(out.column(1).as_ref(), &arrow::array::Int16Array::from(vec![7, 7, 7]) as &dyn arrow::array::Array);
        assert_eq!(p.files[1].apply(batch).unwrap().column(1).null_count(), 3);

        let e = detect(&files, HivePartitioning::Auto, &"k=INTEGER".parse().unwrap()).unwrap_err().to_string();
        assert!(e.contains("a=__HIVE_DEFAULT_PARTITION__/k=y/f.parquet") || e.contains("k=x/f.parquet"), "{e}");
        assert!(e.contains("k=x is not a Int32"), "{e}");
        let e = detect(&files, HivePartitioning::Auto, &"z=INTEGER".parse().unwrap()).unwrap_err().to_string();
        assert!(e.contains("'z', which is no partition key of the inputs (a, k)"), "{e}");
        let e = detect(&paths(&["d/f.parquet"]), HivePartitioning::Auto, &"z=INTEGER".parse().unwrap()).unwrap_err().to_string();
        assert!(e.contains("no Hive partitions"), "{e}");
        let e = detect(&files, HivePartitioning::Never, &"a=INTEGER".parse().unwrap()).unwrap_err().to_string();
        assert!(e.contains("Hive partitioning is off"), "{e}");
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn detection_needs_the_same_keys_everywhere() {
        let same = paths(&["d/a=1/b=x/f.parquet", "d/b=y/a=2/f.parquet"]);
        let p = detect(&same, HivePartitioning::Auto, &HiveTypes::default()).unwrap().unwrap();
        let names: Vec<&str> = p.fields.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(p.files[1].values, vec![Value::Int(2), Value::Text("y".into())]);
        assert!(detect(&same, HivePartitioning::Never, &HiveTypes::default()).unwrap().is_none());

        for odd in [
            &["d/a=1/f.parquet", "d/c=2/f.parquet"][..],
            &["d/a=1/f.parquet", "d/f.parquet"],
            &["d/f.parquet", "d/a=1/f.parquet"],
            &["d/a=1/a=2/f.parquet"],
        ] {
            let odd = paths(odd);
            assert!(detect(&odd, HivePartitioning::Auto, &HiveTypes::default()).unwrap().is_none(), "{odd:?}");
            let e = detect(&odd, HivePartitioning::Always, &HiveTypes::default()).unwrap_err().to_string();
            assert!(e.contains("hive partitioning"), "{e}");
        }
        let e = detect(&paths(&["d/a=1/f.parquet", "d/c=2/f.parquet"]), HivePartitioning::Always, &HiveTypes::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("d/c=2/f.parquet has the partition keys c but d/a=1/f.parquet has a"), "{e}");
    }

    #[test]
    fn partitions_are_applied_to_batches() {
        let p = detect(
            &paths(&["a=1/k=x/f.parquet", "a=__HIVE_DEFAULT_PARTITION__/k=y/f.parquet"]),
            HivePartitioning::Auto,
            &HiveTypes::default(),
        )
        .unwrap()
        .unwrap();
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
