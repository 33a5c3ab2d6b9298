//! Regression tests of the `corank merge` command line (issue 10): the temporary output is
//! registered for the signal handler before it exists and has a short name, the output's
//! mode, the inputs' Parquet logical types kept, row group sizes and the row group limit,
//! stdout errors, outputs that are not regular files, the memory hint, clap's messages,
//! the exit code of an unsupported key type, and `-o -`.

use crate::cli_common::{command, corank, files_in, text};
use arrow::array::{ArrayRef, FixedSizeBinaryArray, Int64Array, ListArray, RecordBatch, StringArray, Time64MicrosecondArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::{ParquetMetaData, SortingColumn};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::SchemaDescriptor;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn footer(path: &Path) -> Arc<ParquetMetaData> {
    SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap().metadata().clone().into()
}

/// A file of `k` (Int64, as given, declared `k ASC NULLS LAST`) and `v` (`width`-byte
/// strings), one row group per entry of `groups`.
fn keyed_file(path: &Path, groups: &[Vec<i64>], width: usize) {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Utf8, false)]));
    let sorting = vec![SortingColumn { column_idx: 0, descending: false, nulls_first: false }];
    let props = WriterProperties::builder().set_sorting_columns(Some(sorting)).set_max_row_group_row_count(Some(1 << 24)).build();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema.clone(), Some(props)).unwrap();
    for g in groups {
        let v: Vec<String> = g.iter().map(|x| format!("{x:0width$}")).collect();
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(g.clone())), Arc::new(StringArray::from(v))]).unwrap();
        w.write(&batch).unwrap();
        w.flush().unwrap();
    }
    w.close().unwrap();
}

/// Two small sorted inputs in `dir`; their paths.
fn two_inputs(dir: &Path) -> (String, String) {
    let (a, b) = (dir.join("a.parquet"), dir.join("b.parquet"));
    keyed_file(&a, &[vec![1, 3, 5]], 4);
    keyed_file(&b, &[vec![2, 4]], 4);
    (a.display().to_string(), b.display().to_string())
}

fn merged_keys(path: &Path) -> Vec<i64> {
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    reader.flat_map(|b| b.unwrap().column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()).collect()
}

fn assert_one_line_error(out: &Output, code: i32, needle: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "not one line: {stderr}");
    assert!(stderr.starts_with("corank: error: "), "{stderr}");
    assert!(stderr.contains(needle), "'{needle}' not in: {stderr}");
}

// --- 1. the temporary file is registered before it exists ---------------------------

/// SIGINT the moment the temporary output appears, many times over: the handler must know
/// the file as soon as it exists, so nothing is ever left. (A merge that finished before
/// the signal landed proves nothing either way and is not counted.)
#[test]
fn sigint_as_the_temporary_file_appears_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.parquet");
    keyed_file(&input, &[(0..200_000).collect()], 16);
    let out_dir = d.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("merged.parquet");
    let mut interrupted = 0;
    for attempt in 0..40 {
        let mut child = command()
            .args(["merge", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "-q", "--engine", "cpu", "--force"])
            .spawn()
            .unwrap();
        // Busy-wait (no sleep) for the first file in the directory: the signal lands right
        // after the file is created.
        let start = Instant::now();
        let mut seen = false;
        while start.elapsed() < Duration::from_secs(60) {
            if std::fs::read_dir(&out_dir).unwrap().next().is_some() {
                seen = true;
                break;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
        }
        if seen {
            // SAFETY: kill(2) with the pid of our own child; no memory is involved.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        }
        let status = child.wait().unwrap();
        let left = files_in(&out_dir);
        if status.signal() == Some(libc::SIGINT) {
            // Ended by the signal: nothing left, or (signalled after the rename) the whole output.
            assert!(
                left.is_empty() || (left == ["merged.parquet"] && merged_keys(&out).len() == 200_000),
                "attempt {attempt}: files left behind: {left:?}"
            );
            interrupted += 1;
        } else {
            assert!(status.success(), "attempt {attempt}: {status}");
            assert_eq!(left, ["merged.parquet"], "attempt {attempt}");
        }
        let _ = std::fs::remove_file(&out);
    }
    assert!(interrupted >= 20, "only {interrupted} of 40 merges were interrupted");
}

// --- 2. the output's mode --------------------------------------------------------------

#[test]
fn output_mode_follows_umask_and_a_replaced_file_keeps_its_mode() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = two_inputs(d.path());
    let out = d.path().join("out.parquet");
    let run = |force: bool| {
        let mut c = command();
        c.args(["merge", &a, &b, "-o", out.to_str().unwrap(), "-q"]);
        if force {
            c.arg("--force");
        }
        // SAFETY: the closure runs in the forked child before exec and only calls umask(2),
        // which is async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                libc::umask(0o022);
                Ok(())
            });
        }
        c.output().unwrap()
    };
    let res = run(false);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o644, "a new output gets 0666 & ~umask, got {mode:o}");
    // --force over a file with mode 0640: the new file (a new inode) keeps 0640.
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
    let old_inode = std::fs::metadata(&out).unwrap().ino();
    let res = run(true);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let meta = std::fs::metadata(&out).unwrap();
    assert_ne!(meta.ino(), old_inode, "the output was replaced");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640, "got {:o}", meta.permissions().mode() & 0o7777);
}

// --- 3. Parquet logical types ---------------------------------------------------------

/// UUID, JSON and TIME(MICROS, adjusted to UTC): the inputs' Parquet types come back as
/// written, not as the types derived from the Arrow schema.
#[test]
fn parquet_logical_types_are_kept() {
    let d = tempfile::tempdir().unwrap();
    let message = "message schema {
        required int64 k;
        required fixed_len_byte_array(16) u (UUID);
        optional binary j (JSON);
        required int64 t (TIME(MICROS,true));
    }";
    let descr = SchemaDescriptor::new(Arc::new(parse_message_type(message).unwrap()));
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("u", DataType::FixedSizeBinary(16), false),
        Field::new("j", DataType::Utf8, true),
        Field::new("t", DataType::Time64(arrow::datatypes::TimeUnit::Microsecond), false),
    ]));
    let mut inputs = Vec::new();
    for (f, keys) in [vec![1i64, 4, 7], vec![2, 3, 9]].into_iter().enumerate() {
        let n = keys.len();
        let uuids: Vec<[u8; 16]> = keys.iter().map(|&k| [k as u8; 16]).collect();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(keys.clone())),
            Arc::new(FixedSizeBinaryArray::try_from_iter(uuids.into_iter()).unwrap()),
            Arc::new(StringArray::from_iter((0..n).map(|i| (i != 1).then(|| format!("{{\"k\": {}}}", keys[i]))))),
            Arc::new(Time64MicrosecondArray::from(keys.iter().map(|k| k * 1_000_000).collect::<Vec<_>>())),
        ];
        let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
        let props = WriterProperties::builder()
            .set_sorting_columns(Some(vec![SortingColumn { column_idx: 0, descending: false, nulls_first: false }]))
            .build();
        let options = ArrowWriterOptions::new().with_properties(props).with_parquet_schema(descr.clone());
        let path = d.path().join(format!("in{f}.parquet"));
        let mut w = ArrowWriter::try_new_with_options(std::fs::File::create(&path).unwrap(), schema.clone(), options).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        inputs.push(path.display().to_string());
    }
    let want = footer(Path::new(&inputs[0]));
    let want = want.file_metadata().schema_descr();
    assert_eq!(want.column(1).logical_type_ref(), Some(&parquet::basic::LogicalType::Uuid), "the input is written as meant");
    let out = d.path().join("out.parquet");
    let res = corank(&["merge", &inputs[0], &inputs[1], "-o", out.to_str().unwrap(), "-q"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let got = footer(&out);
    let got_descr = got.file_metadata().schema_descr();
    for i in 0..want.num_columns() {
        let (w, g) = (want.column(i), got_descr.column(i));
        assert_eq!(
            (g.name(), g.physical_type(), g.logical_type_ref(), g.converted_type()),
            (w.name(), w.physical_type(), w.logical_type_ref(), w.converted_type()),
            "column {i}"
        );
    }
    assert_eq!(merged_keys(&out), [1, 2, 3, 4, 7, 9]);
    let sorting = got.row_group(0).sorting_columns().cloned();
    assert_eq!(sorting, Some(vec![SortingColumn { column_idx: 0, descending: false, nulls_first: false }]));
}

/// The same when the inputs share no Parquet schema: a list column `REQUIRED` in one file
/// and `OPTIONAL` in the other (DuckDB marks a list without nulls required) keeps the inputs'
/// schema with the list optional; with `--union-by-name` and a column only one file has, the
/// schema is derived from the Arrow schema and its UUID and JSON leaves keep the inputs'
/// annotations (which the Arrow schema does not carry).
#[test]
fn parquet_logical_types_are_kept_when_schemas_differ() {
    let d = tempfile::tempdir().unwrap();
    let write = |name: &str, list: &str, extra: bool, keys: Vec<i64>| -> String {
        let message = format!(
            "message schema {{
                required int64 k;
                required fixed_len_byte_array(16) u (UUID);
                optional binary j (JSON);
                {list} group l (LIST) {{ repeated group list {{ optional int64 element; }} }}
                {}
            }}",
            if extra { "optional int64 x;" } else { "" }
        );
        let descr = SchemaDescriptor::new(Arc::new(parse_message_type(&message).unwrap()));
        let item = Arc::new(Field::new("element", DataType::Int64, true));
        let mut fields = vec![
            Field::new("k", DataType::Int64, false),
            Field::new("u", DataType::FixedSizeBinary(16), false),
            Field::new("j", DataType::Utf8, true),
            Field::new("l", DataType::List(item), list == "optional"),
        ];
        if extra {
            fields.push(Field::new("x", DataType::Int64, true));
        }
        let schema = Arc::new(Schema::new(fields));
        let n = keys.len();
        let uuids: Vec<[u8; 16]> = keys.iter().map(|&k| [k as u8; 16]).collect();
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(keys.clone())),
            Arc::new(FixedSizeBinaryArray::try_from_iter(uuids.into_iter()).unwrap()),
            Arc::new(StringArray::from_iter((0..n).map(|i| Some(format!("{{\"k\": {}}}", keys[i]))))),
            Arc::new(ListArray::new(
                Arc::new(Field::new("element", DataType::Int64, true)),
                arrow::buffer::OffsetBuffer::from_lengths(vec![1; n]),
                Arc::new(Int64Array::from(keys.clone())),
                None,
            )),
        ];
        if extra {
            cols.push(Arc::new(Int64Array::from(keys.clone())));
        }
        let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
        let props = WriterProperties::builder()
            .set_sorting_columns(Some(vec![SortingColumn { column_idx: 0, descending: false, nulls_first: false }]))
            .build();
        let options = ArrowWriterOptions::new().with_properties(props).with_parquet_schema(descr);
        let path = d.path().join(name);
        let mut w = ArrowWriter::try_new_with_options(std::fs::File::create(&path).unwrap(), schema, options).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        path.display().to_string()
    };
    let optional = write("optional.parquet", "optional", false, vec![1, 4, 7]);
    let required = write("required.parquet", "required", false, vec![2, 3, 9]);
    let wider = write("wider.parquet", "optional", true, vec![0, 5]);
    let annotations = |path: &Path| {
        let f = footer(path);
        let descr = f.file_metadata().schema_descr();
        (descr.column(1).logical_type_ref().cloned(), descr.column(2).logical_type_ref().cloned())
    };
    let kept = (Some(parquet::basic::LogicalType::Uuid), Some(parquet::basic::LogicalType::Json));
    assert_eq!(annotations(Path::new(&required)), kept, "the inputs are written as meant");
    let out = d.path().join("out.parquet");
    let res = corank(&["merge", &optional, &required, "-o", out.to_str().unwrap(), "-q"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(annotations(&out), kept);
    let l = footer(&out).file_metadata().schema_descr().root_schema().get_fields()[3].clone();
    assert_eq!(l.get_basic_info().repetition(), parquet::basic::Repetition::OPTIONAL, "optional where any input's is");
    assert_eq!(merged_keys(&out), [1, 2, 3, 4, 7, 9]);
    let res = corank(&["merge", &optional, &required, &wider, "-o", out.to_str().unwrap(), "-q", "-f", "--union-by-name"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(annotations(&out), kept, "derived schema, the inputs' annotations");
    assert_eq!(merged_keys(&out), [0, 1, 2, 3, 4, 5, 7, 9]);
}

// --- 4. row groups ---------------------------------------------------------------------

/// One sorted input whose strings repeat (dictionary-encoded, so the footer's sizes make
/// the reader's batches large): every round holds one batch of one run, and the merge's
/// batches are slices of it; row groups are cut at --row-group-size all the same.
#[test]
fn row_groups_have_row_group_size_rows() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.parquet");
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Utf8, false)]));
    let k: Vec<i64> = (0..100_000).collect();
    let v: Vec<String> = k.iter().map(|x| format!("{:0200}", x % 16)).collect();
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(k)), Arc::new(StringArray::from(v))]).unwrap();
    let sorting = vec![SortingColumn { column_idx: 0, descending: false, nulls_first: false }];
    let props = WriterProperties::builder().set_sorting_columns(Some(sorting)).build();
    let mut w = ArrowWriter::try_new(std::fs::File::create(&input).unwrap(), schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let out = d.path().join("out.parquet");
    let res =
        corank(&["merge", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "-q", "--engine", "cpu", "--row-group-size", "30000"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let rows: Vec<i64> = footer(&out).row_groups().iter().map(|g| g.num_rows()).collect();
    assert_eq!(rows, [30000, 30000, 30000, 10000]);
}

/// The writer itself, fed 8,192-row slices of one 100,000-row batch (as a round of one
/// run is handed over): row groups of --row-group-size rows, the slices counted at their
/// own size (1.7 MB each), not their batch's (21 MB).
#[test]
fn writer_counts_slices_at_their_own_size() {
    use corank::parquet::SortedParquetWriter;
    let d = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Utf8, false)]));
    let k: Vec<i64> = (0..100_000).collect();
    let v: Vec<String> = k.iter().map(|x| format!("{x:0200}")).collect();
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(k)), Arc::new(StringArray::from(v))]).unwrap();
    let out = d.path().join("out.parquet");
    let settings = corank::parquet::WriterSettings { row_group_rows: 30_000, row_group_bytes: 16 << 20, ..Default::default() };
    let mut writer = SortedParquetWriter::create(&out, schema, None, &[corank::SortKey::asc("k")], vec![], 100_000, settings).unwrap();
    for start in (0..100_000).step_by(8192) {
        writer.write(batch.slice(start, 8192.min(100_000 - start))).unwrap();
    }
    writer.finish().unwrap();
    let rows: Vec<i64> = footer(&out).row_groups().iter().map(|g| g.num_rows()).collect();
    assert_eq!(rows, [30000, 30000, 30000, 10000]);
}

/// Dictionary encoding per column, chosen on the first row group (src/parquet/dictionary.rs):
/// a column of four values keeps its dictionary in every row group, one of distinct values
/// is written plain in every row group (the first in the smaller of its two encodings,
/// the rest by that choice); the rows read back unchanged and two writes of the same rows
/// give the same bytes. An output of one row group is encoded as the properties say (every
/// dictionary on).
#[test]
fn writer_keeps_a_dictionary_only_where_it_pays() {
    use corank::parquet::SortedParquetWriter;
    let d = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("few", DataType::Utf8, true),
        Field::new("many", DataType::Int64, false),
    ]));
    let n = 100_000usize;
    let k: Vec<i64> = (0..n as i64).collect();
    let mix = |i: u64| (i ^ 0x5DEE_CE66).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1;
    let few: Vec<Option<&str>> =
        (0..n as u64).map(|i| [Some("air"), Some("rail"), None, Some("truck shipment")][(mix(i) >> 40) as usize % 4]).collect();
    let many: Vec<i64> = (0..n as u64).map(|i| mix(i) as i64).collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(k)), Arc::new(StringArray::from(few)), Arc::new(Int64Array::from(many))],
    )
    .unwrap();
    let write = |name: &str, rows: usize| {
        let out = d.path().join(name);
        let settings = corank::parquet::WriterSettings { row_group_rows: 20_000, ..Default::default() };
        let mut writer =
            SortedParquetWriter::create(&out, schema.clone(), None, &[corank::SortKey::asc("k")], vec![], rows, settings).unwrap();
        for start in (0..rows).step_by(8192) {
            writer.write(batch.slice(start, 8192.min(rows - start))).unwrap();
        }
        writer.finish().unwrap();
        out
    };
    let has_dictionary = |path: &Path, column: usize| -> Vec<bool> {
        footer(path).row_groups().iter().map(|g| g.column(column).dictionary_page_offset().is_some()).collect()
    };
    let a = write("a.parquet", n);
    assert_eq!(has_dictionary(&a, 1), [true; 5], "four values keep their dictionary");
    assert_eq!(has_dictionary(&a, 2), [false; 5], "distinct values are written plain");
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&a).unwrap()).unwrap().build().unwrap();
    let back: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    assert_eq!(arrow::compute::concat_batches(&schema, &back).unwrap(), batch);
    let b = write("b.parquet", n);
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "the same rows gave different bytes");
    let one = write("one.parquet", 20_000);
    assert_eq!(has_dictionary(&one, 2), [true], "one row group: every dictionary on, as the properties say");
}

#[test]
fn more_than_32767_row_groups_are_refused_up_front() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.parquet");
    keyed_file(&input, &[(0..40_000).collect()], 4);
    let out_dir = d.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("out.parquet");
    let start = Instant::now();
    let res = corank(&["merge", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--row-group-size", "1"]);
    assert_one_line_error(&res, 2, "--row-group-size");
    assert!(start.elapsed() < Duration::from_secs(5), "refused only after {:?}", start.elapsed());
    assert_eq!(files_in(&out_dir), Vec::<String>::new());
}

// --- 5a. stdout errors -----------------------------------------------------------------

#[test]
fn full_stdout_is_an_error_and_the_output_stays() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = two_inputs(d.path());
    let out = d.path().join("out.parquet");
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let res = command().args(["merge", &a, &b, "-o", out.to_str().unwrap()]).stdout(full).output().unwrap();
    assert_one_line_error(&res, 1, "stdout");
    assert_eq!(merged_keys(&out), [1, 2, 3, 4, 5]);
}

#[test]
fn closed_stdout_pipe_exits_quietly_and_the_output_stays() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = two_inputs(d.path());
    let out = d.path().join("out.parquet");
    // The reading end is closed before the merge starts: the summary meets EPIPE.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let res = command().args(["merge", &a, &b, "-o", out.to_str().unwrap()]).stdout(writer).stderr(Stdio::piped()).output().unwrap();
    assert_eq!(res.status.code(), Some(0), "{} / stderr: {}", res.status, text(&res.stderr));
    assert_eq!(text(&res.stderr), "");
    assert_eq!(merged_keys(&out), [1, 2, 3, 4, 5]);
    // The same with Stdio::piped(), the reader dropped before the merge ends.
    let out2 = d.path().join("out2.parquet");
    let mut child =
        command().args(["merge", &a, &b, "-o", out2.to_str().unwrap()]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let res = child.wait_with_output().unwrap();
    assert_eq!(res.status.code(), Some(0), "{} / stderr: {}", res.status, text(&res.stderr));
    assert_eq!(merged_keys(&out2), [1, 2, 3, 4, 5]);
}

// --- 5b. outputs that are not regular files ------------------------------------------

#[test]
fn outputs_that_are_not_regular_files_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = two_inputs(d.path());
    // A FIFO, with and without --force: refused, and still a FIFO. (Checked first: the
    // device below must never be tried on a build that would replace it.)
    let fifo = d.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    for force in [false, true] {
        let mut args = vec!["merge", &a, &b, "-o", fifo.to_str().unwrap()];
        if force {
            args.push("--force");
        }
        let res = corank(&args);
        assert_one_line_error(&res, 2, "not a regular file");
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced (force {force})");
    }
    // A symlink to a regular file: refused, the link and its target untouched.
    let target = d.path().join("target.parquet");
    std::fs::write(&target, "keep me").unwrap();
    let link = d.path().join("link.parquet");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let res = corank(&["merge", &a, &b, "-o", link.to_str().unwrap(), "--force"]);
    assert_one_line_error(&res, 2, "not a regular file");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    // A directory.
    let dir = d.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    let res = corank(&["merge", &a, &b, "-o", dir.to_str().unwrap(), "--force"]);
    assert_eq!(res.status.code(), Some(2), "{}", text(&res.stderr));
    assert!(dir.is_dir());
    // A device, with --force.
    let res = corank(&["merge", &a, &b, "-o", "/dev/null", "--force"]);
    assert_one_line_error(&res, 2, "not a regular file");
    assert!(std::fs::symlink_metadata("/dev/null").unwrap().file_type().is_char_device(), "/dev/null is no longer a device");
    assert_eq!(files_in(d.path()), ["a.parquet", "b.parquet", "dir", "fifo", "link.parquet", "target.parquet"]);
}

// --- 5c. long output names -------------------------------------------------------------

#[test]
fn output_name_of_250_characters() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = two_inputs(d.path());
    let name = format!("{}.parquet", "x".repeat(250 - ".parquet".len()));
    assert_eq!(name.len(), 250);
    let out = d.path().join(&name);
    let res = corank(&["merge", &a, &b, "-o", out.to_str().unwrap(), "-q"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(merged_keys(&out), [1, 2, 3, 4, 5]);
}

// --- 5d. the memory hint ---------------------------------------------------------------

/// `--memory-limit` too small names the least limit that works; passing it is accepted
/// (for rows of several widths, so the hint is not a round number).
#[test]
fn the_memory_hint_is_enough() {
    let d = tempfile::tempdir().unwrap();
    for width in 1..=12 {
        let dir = d.path().join(format!("w{width}"));
        std::fs::create_dir(&dir).unwrap();
        let paths: Vec<String> = (0..3)
            .map(|f| {
                let p = dir.join(format!("in{f}.parquet"));
                keyed_file(&p, &[(0..2000).map(|k| k * 3 + f).collect()], width * 7);
                p.display().to_string()
            })
            .collect();
        let out = dir.join("out.parquet");
        let mut args: Vec<&str> = vec!["merge"];
        args.extend(paths.iter().map(String::as_str));
        args.extend(["-o", out.to_str().unwrap(), "-q", "--memory-limit", "1KiB"]);
        let res = corank(&args);
        assert_one_line_error(&res, 2, "needs at least");
        let stderr = text(&res.stderr);
        let hint = stderr.trim_end().rsplit("needs at least ").next().unwrap().to_string();
        let n = args.len();
        args[n - 1] = &hint;
        let res = corank(&args);
        assert!(res.status.success(), "width {width}: --memory-limit '{hint}' (from: {stderr}) refused: {}", text(&res.stderr));
    }
}

// --- 5e. clap's messages ---------------------------------------------------------------

#[test]
fn a_missing_argument_is_named() {
    let d = tempfile::tempdir().unwrap();
    let (a, _) = two_inputs(d.path());
    let res = corank(&["merge", &a]);
    assert_one_line_error(&res, 2, "--output");
    assert!(text(&res.stderr).contains("required arguments were not provided"), "{}", text(&res.stderr));
    let res = corank(&["merge", "-o", "x.parquet"]);
    assert_one_line_error(&res, 2, "<INPUT>");
}

// --- 5f. unsupported key type ----------------------------------------------------------

#[test]
fn a_nested_key_column_is_a_usage_error() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("list.parquet");
    let list = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![Some(vec![Some(1)]), Some(vec![Some(2), Some(3)])]);
    let batch = RecordBatch::try_from_iter([("l", Arc::new(list) as ArrayRef)]).unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let out = d.path().join("out.parquet");
    let res = corank(&["merge", path.to_str().unwrap(), "-o", out.to_str().unwrap(), "--by", "l"]);
    assert_one_line_error(&res, 2, "sort column 'l'");
    assert!(!out.exists());
}

// --- 5h. -o - ----------------------------------------------------------------------------

#[test]
fn output_to_stdout_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = two_inputs(d.path());
    let res = command().args(["merge", &a, &b, "-o", "-"]).current_dir(d.path()).output().unwrap();
    assert_one_line_error(&res, 2, "stdout");
    assert_eq!(files_in(d.path()), ["a.parquet", "b.parquet"]);
    // ./- is a file named '-'.
    let res = command().args(["merge", &a, &b, "-o", "./-", "-q"]).current_dir(d.path()).output().unwrap();
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(merged_keys(&d.path().join("-")), [1, 2, 3, 4, 5]);
}
