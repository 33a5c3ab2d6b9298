//! The merge's writer thread, and the checker of the row groups copied unchanged: the
//! thread that owns the output takes merged pieces and copied row groups in output order
//! and renames the output into place only on [`ToWriter::Finish`].

use super::passthrough::{verify_block, Schedule, Verified};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::parquet::inputs::MergePlan;
use crate::parquet::writer::split::{Finished, OutputWriter};
use arrow::array::RecordBatch;
use arrow::row::RowConverter;
use rayon::prelude::*;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What the merge loop sends the writer thread.
pub(super) enum ToWriter {
    Rows(Vec<RecordBatch>),
    /// A row group copied unchanged: the index of its block in the schedule.
    Block(usize),
    Finish,
}

/// The writer thread's body: writes what the merge sends, in order, until
/// [`ToWriter::Finish`] (then the written file and the time spent writing) or until the
/// channel closes without it (`None`: the merge failed, the temporary file is removed).
pub(super) fn write_all(
    mut writer: OutputWriter,
    from_merge: mpsc::Receiver<ToWriter>,
    plan: &MergePlan,
    schedule: &Schedule,
    output: &Path,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Option<(Finished, Duration)>> {
    crate::parquet::name_this_thread("corank-writer");
    let expected_rows = plan.total_rows;
    let mut busy = Duration::ZERO;
    for message in from_merge {
        match message {
            ToWriter::Rows(batches) => {
                let t = Instant::now();
                for b in batches {
                    writer.write(b)?;
                }
                busy += t.elapsed();
                progress(writer.rows());
            }
            ToWriter::Block(k) => {
                let t = Instant::now();
                let b = &schedule.blocks[k];
                let footer = schedule.footers[b.file].as_ref().ok_or_else(|| Error::Internal("a block without its footer".into()))?;
                writer.append_row_group(&plan.files[b.file].path, footer, b.row_group, b.codec_kept)?;
                busy += t.elapsed();
                progress(writer.rows());
            }
            ToWriter::Finish => {
                // Fewer rows than the metadata counts would mean a reader lost some.
                if writer.rows() != expected_rows {
                    return Err(Error::Internal(format!(
                        "{}: merged {} rows but the inputs' metadata counts {expected_rows}; nothing written",
                        output.display(),
                        writer.rows()
                    )));
                }
                let t = Instant::now();
                let written = writer.finish()?;
                return Ok(Some((written, busy + t.elapsed())));
            }
        }
    }
    Ok(None)
}

/// The block checker's body: the copied row groups' key columns decoded and checked ahead
/// of the merge, a few in parallel, sent in schedule order; stops at the first error, when
/// the merge stops listening, or once `cancel` is set.
pub(super) fn check_blocks(
    plan: &MergePlan,
    schedule: &Schedule,
    converter: &RowConverter,
    verified: mpsc::SyncSender<Result<Verified>>,
    cancel: Option<&Cancel>,
) {
    crate::parquet::name_this_thread("corank-check");
    for chunk in schedule.blocks.chunks(rayon::current_num_threads().max(1)) {
        let results: Vec<Result<Verified>> =
            chunk.par_iter().map(|b| crate::cancel::check(cancel).and_then(|()| verify_block(plan, b, converter))).collect();
        for r in results {
            let failed = r.is_err();
            if verified.send(r).is_err() || failed {
                return;
            }
        }
    }
}
