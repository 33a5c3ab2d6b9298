//! The input side of corank's nodes: every input partition polled by its own task
//! ([`spawn_input`]), and one pull of a partition as a future ([`next_batch`]).

use arrow::array::RecordBatch;
use datafusion::common::Result;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::{FutureExt, StreamExt};
use std::future::Future;
use tokio::sync::watch;

/// `input` polled by its own task, up to `buffer` batches ahead, so that inputs decode in
/// parallel: DataFusion's `spawn_buffered`, except that once it has sent its first batch
/// with rows, the task waits until `first_round` is true (the merge took its first round)
/// before it decodes further. On a runtime of one thread, as there, the input is returned
/// as it is.
///
/// Why the wait, twice over (the first batch's latency; `docs/performance.md`):
/// - The send wakes the merge task on this worker thread, into tokio's LIFO slot, which no
///   other worker may steal (tokio issue 4941). Had the task gone on, the worker would
///   decode this input's next batch (hundreds of microseconds to milliseconds in one poll)
///   before it ran the merge, so the first round started one decode late, and the first
///   batch came later than stock's.
/// - The first output batch needs every input's first batch. Until the slowest has
///   decoded, the inputs that are done would decode ahead (stock's, one batch ahead, do)
///   on the workers that the slowest input's decode, woken when its file's bytes are read,
///   waits for.
pub(crate) fn spawn_input(
    mut input: SendableRecordBatchStream,
    buffer: usize,
    mut first_round: watch::Receiver<bool>,
) -> SendableRecordBatchStream {
    let multi_thread =
        tokio::runtime::Handle::try_current().is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if !multi_thread {
        return input;
    }
    let mut builder = RecordBatchReceiverStreamBuilder::new(input.schema(), buffer);
    let tx = builder.tx();
    builder.spawn(async move {
        let mut waited = false;
        while let Some(item) = input.next().await {
            let rows = item.as_ref().map_or(0, |b| b.num_rows());
            if tx.send(item).await.is_err() {
                break; // the merge is gone
            }
            if !waited && rows > 0 {
                waited = true;
                // An error: the merge is gone (the next send says so).
                drop(first_round.wait_for(|&taken| taken).await);
            }
        }
        Ok(())
    });
    builder.build()
}

/// What a pull of input `i` gave, and its stream to pull again.
pub(crate) type Arrival = (usize, Option<Result<RecordBatch>>, SendableRecordBatchStream);

/// The next batch of input `i`.
pub(crate) fn next_batch(i: usize, stream: SendableRecordBatchStream) -> impl Future<Output = Arrival> {
    stream.into_future().map(move |(item, stream)| (i, item, stream))
}
