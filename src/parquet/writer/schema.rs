//! The output's Parquet schema: the inputs' own where they share one, else the one derived
//! from the Arrow schema with the inputs' annotations that Arrow does not carry.

use crate::parquet::inputs::InputFile;
use arrow::datatypes::Schema;
use parquet::arrow::ArrowSchemaConverter;
use parquet::schema::types::SchemaDescriptor;

/// The inputs' common Parquet schema, for the output to keep their logical types (UUID,
/// JSON, TIME adjusted to UTC, ...), which the Arrow schema does not carry: the first
/// file's, when every file has the same one but for the repetition of top-level leaves
/// (`OPTIONAL` where any file's is: files of one table may differ in nullability alone,
/// see [`crate::parquet::inputs`]), `schema` (the merge's Arrow schema) is the first file's Arrow
/// schema column for column (names, types), and it stores the columns as the schema derived
/// from `schema` would (same leaves, physical types, lengths and levels: only annotations
/// differ, so the Arrow writer writes the columns as it writes its own). The files' schemas
/// as stored ([`InputFile::stored_schema`](InputFile::stored_schema)): an
/// INTERVAL, read as its 12 bytes, stays an INTERVAL. Otherwise the schema derived from
/// `schema` with the inputs' UUID, JSON, BSON, ENUM and INTERVAL annotations where
/// they agree (`with_input_annotations`), or `None`: the output's schema is derived from
/// `schema`. Files whose schema is this one keep their row groups eligible for passthrough.
pub fn common_parquet_schema(files: &[InputFile], schema: &Schema) -> Option<SchemaDescriptor> {
    let derived = ArrowSchemaConverter::new().convert(schema).ok()?;
    shared_parquet_schema(files, schema, &derived).or_else(|| with_input_annotations(files, schema, &derived))
}

/// The inputs' one Parquet schema (but for top-level repetition), when it stores the columns
/// as `derived` (the schema derived from `schema`) does: see [`common_parquet_schema`].
fn shared_parquet_schema(files: &[InputFile], schema: &Schema, derived: &SchemaDescriptor) -> Option<SchemaDescriptor> {
    use parquet::basic::Repetition;
    use parquet::schema::types::Type;
    use std::sync::Arc;
    let first = files.first()?;
    // The schemas as stored: an INTERVAL is read as bytes, and kept an INTERVAL.
    let first_descr = first.stored_schema.as_ref();
    let root = first_descr.root_schema();
    let mut fields: Vec<Arc<Type>> = root.get_fields().to_vec();
    // A top-level field (a leaf, or a list or struct) with its repetition set, the rest of
    // it as it is.
    let with_repetition = |t: &Type, repetition: Repetition| -> Option<Type> {
        let info = t.get_basic_info();
        let id = info.has_id().then(|| info.id());
        match t {
            Type::PrimitiveType { basic_info, .. } => {
                leaf_like(t, repetition, basic_info.converted_type(), basic_info.logical_type_ref().cloned())
            }
            Type::GroupType { basic_info, fields } => Type::group_type_builder(basic_info.name())
                .with_repetition(repetition)
                .with_converted_type(basic_info.converted_type())
                .with_logical_type(basic_info.logical_type_ref().cloned())
                .with_fields(fields.clone())
                .with_id(id)
                .build()
                .ok(),
        }
    };
    let mut widened = false;
    for f in &files[1..] {
        let other = f.stored_schema.root_schema().get_fields();
        if other.len() != fields.len() {
            return None;
        }
        for (mine, theirs) in fields.iter_mut().zip(other) {
            if mine == theirs {
                continue;
            }
            // Equal but for a top-level field's REQUIRED against OPTIONAL: OPTIONAL (DuckDB
            // writes a list or struct without nulls as REQUIRED too).
            let optional = |t: &Type| t.get_basic_info().has_repetition() && t.get_basic_info().repetition() != Repetition::REPEATED;
            if !(optional(mine) && optional(theirs)) {
                return None;
            }
            let (a, b) = (with_repetition(mine, Repetition::OPTIONAL)?, with_repetition(theirs, Repetition::OPTIONAL)?);
            if a != b {
                return None;
            }
            *mine = Arc::new(a);
            widened = true;
        }
    }
    let descr = if widened {
        let root = Type::group_type_builder(root.name()).with_fields(fields).build().ok()?;
        SchemaDescriptor::new(Arc::new(root))
    } else {
        first_descr.clone()
    };
    let arrow = first.metadata.schema();
    let same_arrow = arrow.fields().len() == schema.fields().len()
        && arrow.fields().iter().zip(schema.fields()).all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    let same_leaves = derived.num_columns() == descr.num_columns()
        && derived.columns().iter().zip(descr.columns()).all(|(d, c)| {
            d.path() == c.path()
                && d.physical_type() == c.physical_type()
                && (d.physical_type() != parquet::basic::Type::FIXED_LEN_BYTE_ARRAY || d.type_length() == c.type_length())
                && d.max_def_level() == c.max_def_level()
                && d.max_rep_level() == c.max_rep_level()
        });
    (same_arrow && same_leaves).then_some(descr)
}

/// The leaf `t` (a primitive type) with this repetition and these annotations, the rest of it
/// (name, physical type, length, precision, scale, id) as it is; `None` for a group.
fn leaf_like(
    t: &parquet::schema::types::Type,
    repetition: parquet::basic::Repetition,
    converted: parquet::basic::ConvertedType,
    logical: Option<parquet::basic::LogicalType>,
) -> Option<parquet::schema::types::Type> {
    use parquet::schema::types::Type;
    let Type::PrimitiveType { basic_info, physical_type, type_length, scale, precision } = t else { return None };
    Type::primitive_type_builder(basic_info.name(), *physical_type)
        .with_repetition(repetition)
        .with_converted_type(converted)
        .with_logical_type(logical)
        .with_length(*type_length)
        .with_precision(*precision)
        .with_scale(*scale)
        .with_id(basic_info.has_id().then(|| basic_info.id()))
        .build()
        .ok()
}

/// The schema derived from `schema` (`derived`) with the logical types of its top-level
/// leaves that the Arrow schema does not carry (UUID, JSON, BSON, ENUM, and the converted
/// type INTERVAL, read as its 12 bytes: see [`crate::parquet::inputs::types`]) taken from the inputs,
/// for when they share no schema (`--union-by-name`, a list required in one file): a leaf is
/// annotated when every input that has a top-level column of its name stores it as a leaf of
/// the same physical type and length with that one annotation, and reads it as the output's
/// Arrow type. `None` when no leaf gains one (the writer derives the same).
fn with_input_annotations(files: &[InputFile], schema: &Schema, derived: &SchemaDescriptor) -> Option<SchemaDescriptor> {
    use parquet::basic::{ConvertedType, LogicalType};
    use parquet::schema::types::Type;
    use std::sync::Arc;
    let root = derived.root_schema();
    let mut fields: Vec<Arc<Type>> = root.get_fields().to_vec();
    let mut annotated = false;
    for (field, arrow_field) in fields.iter_mut().zip(schema.fields()) {
        let Type::PrimitiveType { basic_info, physical_type, type_length, .. } = field.as_ref() else { continue };
        if basic_info.logical_type_ref().is_some() && !matches!(basic_info.logical_type_ref(), Some(LogicalType::String)) {
            continue;
        }
        // The one annotation every input that has this column gives it.
        let agreed = || -> Option<(Option<LogicalType>, ConvertedType)> {
            let mut seen: Option<(Option<LogicalType>, ConvertedType)> = None;
            for f in files {
                let inputs = f.stored_schema.root_schema().get_fields();
                let Some(theirs) = inputs.iter().find(|t| t.name() == basic_info.name()) else { continue };
                let Type::PrimitiveType { basic_info: info, physical_type: p, type_length: len, .. } = theirs.as_ref() else {
                    return None;
                };
                let reads_as = f.metadata.schema().field_with_name(basic_info.name()).ok().map(|a| a.data_type());
                if p != physical_type || len != type_length || reads_as != Some(arrow_field.data_type()) {
                    return None;
                }
                let logical = info.logical_type_ref().cloned();
                let kept = match &logical {
                    Some(l) => matches!(l, LogicalType::Uuid | LogicalType::Json | LogicalType::Bson | LogicalType::Enum),
                    None => info.converted_type() == ConvertedType::INTERVAL,
                };
                // The same logical type (converted types may differ), or both INTERVAL.
                let differs = |(l, c): &(Option<LogicalType>, ConvertedType)| *l != logical || (l.is_none() && *c != info.converted_type());
                let annotation = (logical.clone(), info.converted_type());
                if !kept || seen.as_ref().is_some_and(differs) {
                    return None;
                }
                seen = Some(annotation);
            }
            seen
        };
        let Some((logical, converted)) = agreed() else { continue };
        let Some(t) = leaf_like(field, basic_info.repetition(), converted, logical) else { continue };
        *field = Arc::new(t);
        annotated = true;
    }
    if !annotated {
        return None;
    }
    let root = Type::group_type_builder(root.name()).with_fields(fields).build().ok()?;
    Some(SchemaDescriptor::new(Arc::new(root)))
}
