//! The decode plan of a column chunk (issue 69, stage 2): from its page table and its
//! column's descriptor, the work of each page, for the device kernels
//! (`cuda/parquet_decode.cu`) and their CPU reference ([`super::decode_cpu`]) alike. Pure:
//! no I/O, no device.
//!
//! Covered (anything else is [`Planned::NotCovered`] with the reason in words, which the
//! caller answers by decoding the chunk on the CPU as today; never an error, never a wrong
//! answer):
//!
//! - flat columns: a top-level leaf, maximum repetition level 0, maximum definition level 0
//!   or 1;
//! - physical types INT32, INT64, FLOAT, DOUBLE, read as the Arrow type parquet-rs's arrow
//!   reader gives the column ([`arrow_types`]: its own schema conversion, the writer's
//!   embedded Arrow schema included) where that is Int32, Date32 or Decimal128 (INT32),
//!   Int64 or Decimal128 (INT64), Float32 (FLOAT), Float64 (DOUBLE); a Decimal128 widens
//!   each value to 16 bytes, sign-extended, as parquet-rs does;
//! - FIXED_LEN_BYTE_ARRAY of 1 to 255 bytes read as FixedSizeBinary (copied), or of at
//!   most 16 bytes read as Decimal128 (a big-endian two's complement integer sign-extended
//!   to 16 little-endian bytes, as parquet-rs does);
//! - BYTE_ARRAY read as Utf8 or Binary (i32 offsets) or LargeUtf8 or LargeBinary (i64
//!   offsets, where the embedded Arrow schema asks): the output is offsets and a values
//!   buffer ([`super::decode_cpu`] says how); the views (Utf8View, BinaryView), a
//!   dictionary-typed column and decimals stored as byte arrays are not covered;
//! - value encodings PLAIN and RLE_DICTIONARY / PLAIN_DICTIONARY (page by page: a chunk
//!   that falls back from its dictionary to PLAIN mid-chunk is covered), the dictionary page
//!   PLAIN; DELTA_BINARY_PACKED for INT32 and INT64 (arrow-rs's v2 fallback, DuckDB's v2);
//! - definition levels (maximum 1): the RLE / bit-packed hybrid of bit width 1, with its
//!   4-byte length prefix in a data page v1 (level encoding RLE), its stated byte length
//!   in a data page v2;
//! - data pages v1 and v2 (index pages are skipped).
//!
//! A page's positions are relative to its body once decompressed, in the layout of
//! [`super::decompress`] (a v2 page's levels, then its values), so one plan serves the
//! device buffer (each page's `PageOut` offset added) and the CPU's bodies. A v1 page's
//! definition levels state their own length inside the body, so where its values start is
//! found by the decoder, bounds-checked there.
//!
//! A table that contradicts its column (a v2 page with repetition levels in a column
//! without repetition, rows that differ from values in a flat column, a dictionary page
//! too short for its entries, a dictionary-encoded page with no dictionary) is an `Err`
//! naming the page: the chunk is damaged, and the CPU path would fail on it too.

use super::page_table::{PageKind, PageTable};
use arrow::datatypes::DataType;
use parquet::basic::{Encoding, Type as PhysicalType};
use parquet::schema::types::{ColumnDescriptor, SchemaDescriptor};

/// The physical values a page holds, by width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Physical {
    /// INT32 or FLOAT: 4 bytes.
    Four,
    /// INT64 or DOUBLE: 8 bytes.
    Eight,
    /// BYTE_ARRAY: each value a 4-byte little-endian length, then its bytes.
    ByteArray,
    /// FIXED_LEN_BYTE_ARRAY of this many bytes (1 to 255).
    FixedLen(usize),
}

impl Physical {
    /// Bytes a stored value takes (a byte array's: at least, its length prefix).
    pub fn bytes(self) -> usize {
        match self {
            Physical::Four | Physical::ByteArray => 4,
            Physical::Eight => 8,
            Physical::FixedLen(n) => n,
        }
    }
}

/// How a stored value becomes an output value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Widen {
    /// The bytes as stored.
    Copy,
    /// Sign-extended to a 16-byte little-endian integer (Decimal128).
    SignExtend16,
    /// A big-endian two's complement integer (FIXED_LEN_BYTE_ARRAY, at most 16 bytes)
    /// sign-extended to a 16-byte little-endian one (Decimal128), as parquet-rs does.
    BigEndian16,
}

/// How a data page's values are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Values {
    Plain,
    /// Indices into the dictionary page: a bit-width byte, then the hybrid without a length
    /// prefix.
    Dictionary,
    /// DELTA_BINARY_PACKED (INT32, INT64: [`super::delta`]).
    Delta,
}

/// Where a data page's definition levels are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Levels {
    /// None: a column of maximum definition level 0 (every value defined).
    None,
    /// A v1 page's: a 4-byte little-endian length, then the hybrid, at the body's start;
    /// the values follow.
    Prefixed,
    /// A v2 page's: `len` bytes at `at` in the body (after its repetition levels' bytes).
    Stated { at: usize, len: usize },
}

/// The work of one data page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DataPage {
    /// The page's index in the chunk's page table.
    pub page: usize,
    /// Values, nulls included (a flat column's rows).
    pub values: u32,
    /// The output row of its first value, counted from the chunk's first.
    pub first_row: u64,
    /// The body's bytes once decompressed.
    pub body_len: usize,
    pub levels: Levels,
    /// Where the values start in the body (`Levels::Prefixed`: after the levels, which the
    /// decoder finds; this is 0 then).
    pub values_at: usize,
    pub encoding: Values,
    /// A v2 page's null count (checked against its levels).
    pub nulls: Option<u32>,
}

/// The dictionary page of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dictionary {
    pub page: usize,
    pub entries: u32,
    pub body_len: usize,
}

/// The decode plan of a covered column chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodePlan {
    /// The Arrow type of the output (parquet-rs's for the column).
    pub data_type: DataType,
    pub physical: Physical,
    pub widen: Widen,
    /// Bytes a value of the output takes (a byte array's: one offset, 4 or 8).
    pub out_width: usize,
    /// A byte array column read as a string type: each value must be UTF-8 (parquet-rs
    /// checks as much, and Arrow's string arrays promise it).
    pub utf8: bool,
    /// Whether values may be null (maximum definition level 1): the output has a validity
    /// bitmap.
    pub nullable: bool,
    /// Rows of the chunk (its values).
    pub rows: u64,
    pub dictionary: Option<Dictionary>,
    pub pages: Vec<DataPage>,
}

/// A chunk's plan, or why it is not covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Planned {
    Covered(DecodePlan),
    NotCovered(String),
}

/// The Arrow type parquet-rs's arrow reader gives each leaf column of a file (`None` for a
/// leaf that is not a top-level primitive column, or where the schema does not convert):
/// its own conversion, with the writer's embedded Arrow schema where there is one.
pub(crate) fn arrow_types(schema: &SchemaDescriptor, kv: Option<&Vec<parquet::file::metadata::KeyValue>>) -> Vec<Option<DataType>> {
    let Ok(arrow) = parquet::arrow::parquet_to_arrow_schema(schema, kv) else {
        return vec![None; schema.num_columns()];
    };
    (0..schema.num_columns())
        .map(|leaf| {
            let root = schema.get_column_root_idx(leaf);
            let c = schema.column(leaf);
            // A flat column is its own root: one path element.
            (c.path().parts().len() == 1 && root < arrow.fields().len()).then(|| arrow.field(root).data_type().clone())
        })
        .collect()
}

/// What an Arrow type needs from a physical type (of `type_length` bytes where fixed):
/// (physical width, widening, output width), or `None` where the pair is not covered.
fn conversion(physical: PhysicalType, type_length: i32, data_type: &DataType) -> Option<(Physical, Widen, usize)> {
    use DataType as D;
    let flba = usize::try_from(type_length).ok().filter(|n| (1..=255).contains(n));
    match (physical, data_type) {
        (PhysicalType::FIXED_LEN_BYTE_ARRAY, D::FixedSizeBinary(n)) => {
            flba.filter(|&l| usize::try_from(*n).ok() == Some(l)).map(|l| (Physical::FixedLen(l), Widen::Copy, l))
        }
        (PhysicalType::FIXED_LEN_BYTE_ARRAY, D::Decimal128(..)) => {
            flba.filter(|&l| l <= 16).map(|l| (Physical::FixedLen(l), Widen::BigEndian16, 16))
        }
        (PhysicalType::INT32, D::Int32 | D::Date32) | (PhysicalType::FLOAT, D::Float32) => Some((Physical::Four, Widen::Copy, 4)),
        (PhysicalType::INT64, D::Int64) | (PhysicalType::DOUBLE, D::Float64) => Some((Physical::Eight, Widen::Copy, 8)),
        (PhysicalType::INT32, D::Decimal128(..)) => Some((Physical::Four, Widen::SignExtend16, 16)),
        (PhysicalType::INT64, D::Decimal128(..)) => Some((Physical::Eight, Widen::SignExtend16, 16)),
        (PhysicalType::BYTE_ARRAY, D::Utf8 | D::Binary) => Some((Physical::ByteArray, Widen::Copy, 4)),
        (PhysicalType::BYTE_ARRAY, D::LargeUtf8 | D::LargeBinary) => Some((Physical::ByteArray, Widen::Copy, 8)),
        _ => None,
    }
}

/// Plans the decoding of a chunk: `table` its page table, `column` its descriptor,
/// `data_type` the Arrow type parquet-rs gives it ([`arrow_types`]; `None`: not a flat
/// column). `Err` names the page where the table contradicts the column.
pub(crate) fn plan(table: &PageTable, column: &ColumnDescriptor, data_type: Option<&DataType>) -> Result<Planned, String> {
    let not = |why: String| Ok(Planned::NotCovered(why));
    if column.max_rep_level() != 0 {
        return not("a repeated or nested column".into());
    }
    if column.max_def_level() > 1 {
        return not(format!("a nested column (maximum definition level {})", column.max_def_level()));
    }
    let Some(data_type) = data_type else {
        return not("not a flat column of a schema parquet-rs converts".into());
    };
    let physical = column.physical_type();
    let Some((phys, widen, out_width)) = conversion(physical, column.type_length(), data_type) else {
        return not(format!("{physical} read as {data_type} is not decoded on the device yet"));
    };
    let nullable = column.max_def_level() == 1;
    let mut dictionary = None;
    let mut pages = Vec::with_capacity(table.pages.len());
    let mut rows = 0u64;
    for (i, p) in table.pages.iter().enumerate() {
        let at = |detail: String| format!("page {i}: {detail}");
        match p.kind {
            PageKind::Index => continue,
            PageKind::Dictionary => {
                #[allow(deprecated)]
                let plain = matches!(p.encoding, Some(Encoding::PLAIN | Encoding::PLAIN_DICTIONARY));
                if !plain {
                    return not(format!("a dictionary page encoded {:?}", p.encoding));
                }
                let need = p.num_values as usize * phys.bytes();
                if need > p.uncompressed_size {
                    return Err(at(format!(
                        "a dictionary of {} entries needs {need} bytes, its page holds {}",
                        p.num_values, p.uncompressed_size
                    )));
                }
                dictionary = Some(Dictionary { page: i, entries: p.num_values, body_len: p.uncompressed_size });
            }
            PageKind::DataV1 | PageKind::DataV2 => {
                #[allow(deprecated)]
                let encoding = match p.encoding {
                    Some(Encoding::PLAIN) => Values::Plain,
                    Some(Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY) => Values::Dictionary,
                    Some(Encoding::DELTA_BINARY_PACKED) if matches!(physical, PhysicalType::INT32 | PhysicalType::INT64) => Values::Delta,
                    other => return not(format!("data pages encoded {other:?}")),
                };
                if encoding == Values::Dictionary && dictionary.is_none() {
                    return Err(at("a dictionary-encoded page with no dictionary page before it".into()));
                }
                let (levels, values_at, nulls) = if p.kind == PageKind::DataV1 {
                    let levels = match (nullable, p.level_encodings) {
                        (false, _) => Levels::None,
                        (true, Some((Encoding::RLE, _))) => Levels::Prefixed,
                        (true, other) => return not(format!("definition levels encoded {:?}", other.map(|e| e.0))),
                    };
                    (levels, 0, None)
                } else {
                    let rep = p.levels_len - p.def_levels_len;
                    if rep != 0 {
                        return Err(at(format!("{rep} bytes of repetition levels in a column without repetition")));
                    }
                    let (nulls, page_rows) = p.v2_counts.unwrap_or((0, p.num_values));
                    if page_rows != p.num_values {
                        return Err(at(format!("{page_rows} rows and {} values in a flat column", p.num_values)));
                    }
                    if nulls > p.num_values || (!nullable && nulls != 0) {
                        return Err(at(format!(
                            "{nulls} nulls among {} values of a column of maximum definition level {}",
                            p.num_values,
                            column.max_def_level()
                        )));
                    }
                    let levels = if nullable {
                        Levels::Stated { at: rep, len: p.def_levels_len }
                    } else if p.def_levels_len != 0 {
                        return Err(at(format!("{} bytes of definition levels in a required column", p.def_levels_len)));
                    } else {
                        Levels::None
                    };
                    (levels, p.levels_len, Some(nulls))
                };
                pages.push(DataPage {
                    page: i,
                    values: p.num_values,
                    first_row: rows,
                    body_len: p.uncompressed_size,
                    levels,
                    values_at,
                    encoding,
                    nulls,
                });
                rows += u64::from(p.num_values);
            }
        }
    }
    let utf8 = matches!(data_type, DataType::Utf8 | DataType::LargeUtf8);
    Ok(Planned::Covered(DecodePlan {
        data_type: data_type.clone(),
        physical: phys,
        widen,
        out_width,
        utf8,
        nullable,
        rows,
        dictionary,
        pages,
    }))
}
